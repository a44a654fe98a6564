package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
)

// filler sets every exported field of a value, recursively, to a value
// of its own: numbers count up, strings are "s1", "s2", ..., slices get
// one element and maps one entry. With empty set, slices and maps are
// empty but not nil and everything else is left zero, which is where
// omitempty and nil-versus-empty differ.
type filler struct {
	n     int
	empty bool
}

func (f *filler) fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				f.fill(v.Field(i))
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		f.fill(v.Elem())
	case reflect.Slice:
		if f.empty {
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			return
		}
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		f.fill(v.Index(0))
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		if f.empty {
			return
		}
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		f.fill(k)
		f.fill(e)
		v.SetMapIndex(k, e)
	default:
		if f.empty {
			return
		}
		f.n++
		switch v.Kind() {
		case reflect.String:
			v.SetString(fmt.Sprintf("s%d", f.n))
		case reflect.Int, reflect.Int64:
			v.SetInt(int64(f.n))
		case reflect.Uint64:
			v.SetUint(uint64(f.n))
		case reflect.Float64:
			v.SetFloat(float64(f.n) + 0.5)
		case reflect.Bool:
			v.SetBool(true)
		default:
			panic("filler: no value for kind " + v.Kind().String())
		}
	}
}

// filled returns a T with every exported field set (or, with empty, every
// slice and map empty).
func filled[T any](t *testing.T, empty bool) T {
	t.Helper()
	var v T
	f := &filler{empty: empty}
	f.fill(reflect.ValueOf(&v).Elem())
	if !empty {
		if path := zeroField(reflect.ValueOf(v), reflect.TypeOf(v).String()); path != "" {
			t.Fatalf("filler left %s zero", path)
		}
	}
	return v
}

// zeroField names an exported field of v that is zero, or returns "".
func zeroField(v reflect.Value, path string) string {
	if v.IsZero() {
		return path
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			if sf := v.Type().Field(i); sf.IsExported() {
				if p := zeroField(v.Field(i), path+"."+sf.Name); p != "" {
					return p
				}
			}
		}
	case reflect.Pointer:
		return zeroField(v.Elem(), path)
	case reflect.Slice:
		return zeroField(v.Index(0), path+"[0]")
	}
	return ""
}

func marshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sameJSON checks that a value converts to one with the same JSON, full,
// empty and zero.
func sameJSON[T, U any](t *testing.T, convert func(T) U) {
	t.Helper()
	var zero T
	for _, v := range []T{filled[T](t, false), filled[T](t, true), zero} {
		if in, out := marshal(t, v), marshal(t, convert(v)); in != out {
			t.Errorf("%T converts to different JSON:\n  %s\n  %s", v, in, out)
		}
	}
}

// TestConvertKeepsTheJSON checks that every type the API once answered
// (or read) as the scheduler's own converts to a wire type with the same
// JSON, so that the API did not change when it got types of its own, and
// that no field the scheduler adds is left out.
func TestConvertKeepsTheJSON(t *testing.T) {
	sameJSON(t, deviceToWire)
	sameJSON(t, DeviceSpecToWire)
	sameJSON(t, DeviceSpecFromWire)
	sameJSON(t, claimToWire)
	sameJSON(t, claimFromWire)
	sameJSON(t, labelSelectorToWire)
	sameJSON(t, labelSelectorFromWire)
	sameJSON(t, assignmentToWire)
	sameJSON(t, whyNotToWire)
	sameJSON(t, WhyNotFromWire)
	sameJSON(t, policyConfigToWire)
	sameJSON(t, statsToWire)
	sameJSON(t, poolInfoToWire)
	sameJSON(t, recommendationToWire)

	// The policies were the state's maps under "types" and "pools".
	type statePolicies struct {
		Types map[fsm.DeviceType]fsm.PolicyConfig `json:"types"`
		Pools map[string]fsm.PolicyConfig         `json:"pools"`
	}
	sameJSON(t, func(p statePolicies) wire.Policies { return policiesToWire(p.Types, p.Pools) })
}

// jsonShape is v's JSON with every number, string and bool dropped: the
// object keys, nested.
func jsonShape(t *testing.T, v any) any {
	t.Helper()
	var tree any
	if err := json.Unmarshal([]byte(marshal(t, v)), &tree); err != nil {
		t.Fatal(err)
	}
	var strip func(any) any
	strip = func(x any) any {
		switch x := x.(type) {
		case map[string]any:
			for k, v := range x {
				x[k] = strip(v)
			}
			return x
		case []any:
			for i, v := range x {
				x[i] = strip(v)
			}
			return x
		}
		return nil
	}
	return strip(tree)
}

// TestConvertKeepsEveryField checks the types whose wire form differs
// (durations and times): every field of the scheduler's value has its
// key in the API's, and a request survives the trip both ways.
func TestConvertKeepsEveryField(t *testing.T) {
	a := filled[fsm.Allocation](t, false)
	if in, out := jsonShape(t, a), jsonShape(t, allocationToWire(&a)); !reflect.DeepEqual(in, out) {
		t.Errorf("allocation fields differ:\n  %v\n  %v", in, out)
	}
	h := filled[fsm.Host](t, false)
	if in, out := jsonShape(t, h), jsonShape(t, hostToWire(h)); !reflect.DeepEqual(in, out) {
		t.Errorf("host fields differ:\n  %v\n  %v", in, out)
	}
	for _, empty := range []bool{false, true} {
		r := filled[fsm.Request](t, empty)
		if back := requestFromWire(RequestToWire(r)); !reflect.DeepEqual(back, r) {
			t.Errorf("request round trip:\n  %+v\n  %+v", r, back)
		}
	}
	rt := filled[fsm.Retention](t, false)
	w := retentionToWire(rt)
	if back := retentionFromWire(wire.RetentionRequest{MaxCount: w.MaxCount, MaxAge: w.MaxAge}); back != rt {
		t.Errorf("retention round trip: %+v, %+v", rt, back)
	}
	pc := filled[fsm.PolicyConfig](t, false)
	wpc := policyConfigToWire(pc)
	if back := policyConfigFromWire(wire.PolicyRequest{Policy: wpc.Policy, PreemptionGap: wpc.PreemptionGap}); back != pc {
		t.Errorf("policy round trip: %+v, %+v", pc, back)
	}
}

func TestAllocationToWire(t *testing.T) {
	a := &fsm.Allocation{
		ID: "a", Status: fsm.Active, RequestedAt: 1e18, AllocatedAt: 1e18 + 5e9,
		Request: fsm.Request{Claims: []fsm.Claim{{Type: fsm.GPU, Count: 1}}, Timeout: time.Minute},
	}
	w := allocationToWire(a)
	if got := w.AllocatedAt.Sub(w.RequestedAt); got != 5*time.Second || !w.EndedAt.IsZero() {
		t.Fatalf("times %+v", w)
	}
	var m map[string]any
	_ = json.Unmarshal([]byte(marshal(t, w)), &m)
	if _, ok := m["ended_at"]; ok {
		t.Fatalf("an unset time is sent: %v", m)
	}
	if m["request"].(map[string]any)["timeout"] != "1m0s" {
		t.Fatalf("timeout not a string: %v", m)
	}
}

func stringsOf[S ~string](list []S) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = string(s)
	}
	return out
}

// TestWireConstants checks that the constants the wire package repeats
// for clients are the scheduler's and the cluster's.
func TestWireConstants(t *testing.T) {
	lists := []struct {
		name      string
		wire, fsm []string
	}{
		{"device types", stringsOf(wire.DeviceTypes), stringsOf(fsm.DeviceTypes)},
		{"policies", stringsOf(wire.KnownPolicies), stringsOf(fsm.Policies)},
		{"allocation statuses", stringsOf(wire.AllocStatuses), stringsOf(fsm.AllocStatuses)},
		{"device statuses",
			stringsOf([]wire.DeviceStatus{wire.Available, wire.Draining, wire.Unhealthy, wire.Offline}),
			stringsOf([]fsm.DeviceStatus{fsm.Available, fsm.Draining, fsm.Unhealthy, fsm.Offline})},
		{"recommendation kinds",
			stringsOf([]wire.RecommendationKind{wire.KindSwitchPolicy, wire.KindAddCapacity, wire.KindRebalance,
				wire.KindDrainUnhealthy, wire.KindLongRunning, wire.KindShortRunning, wire.KindKeepPolicy}),
			stringsOf([]fsm.RecommendationKind{fsm.KindSwitchPolicy, fsm.KindAddCapacity, fsm.KindRebalance,
				fsm.KindDrainUnhealthy, fsm.KindLongRunning, fsm.KindShortRunning, fsm.KindKeepPolicy})},
		{"recommendation priorities",
			stringsOf([]wire.RecommendationPriority{wire.PriorityHigh, wire.PriorityMedium, wire.PriorityLow}),
			stringsOf([]fsm.RecommendationPriority{fsm.PriorityHigh, fsm.PriorityMedium, fsm.PriorityLow})},
		{"error codes",
			[]string{wire.CodeInvalid, wire.CodeBadSnapshot, wire.CodeNotFound, wire.CodeConflict, wire.CodeNotActive,
				wire.CodeNoCapacity, wire.CodeNoLeader, wire.CodeNotLeader, wire.CodeShutdown, wire.CodeNotServer,
				wire.CodeTimeout},
			[]string{fsm.ErrInvalid.Code, fsm.ErrSnapshot.Code, fsm.ErrNotFound.Code, fsm.ErrConflict.Code,
				fsm.ErrNotActive.Code, fsm.ErrNoCapacity.Code, cluster.ErrNoLeader.Code, cluster.ErrNotLeader.Code,
				cluster.ErrShutdown.Code, cluster.ErrNotServer.Code, cluster.ErrTimeout.Code}},
		{"all pools", []string{wire.AllPools}, []string{fsm.AllPools}},
	}
	for _, l := range lists {
		if !slices.Equal(l.wire, l.fsm) {
			t.Errorf("%s: wire has %q, the server %q", l.name, l.wire, l.fsm)
		}
	}
	if wire.DefaultPreemptionGap != fsm.DefaultPreemptionGap {
		t.Errorf("default preemption gap: wire %d, fsm %d", wire.DefaultPreemptionGap, fsm.DefaultPreemptionGap)
	}
	// Every code the API answers, but those of a bug (500), has its
	// constant.
	codes := []string{
		wire.CodeBadRequest, wire.CodeInvalid, wire.CodeBadSnapshot, wire.CodeNotFound, wire.CodeMethodNotAllowed,
		wire.CodeConflict, wire.CodeNotActive, wire.CodeNoCapacity, wire.CodeQuotaExceeded, wire.CodeRequestIDReused, wire.CodeBodyTooLarge, wire.CodeOverloaded,
		wire.CodeNoLeader, wire.CodeNotLeader, wire.CodeShutdown, wire.CodeNotServer, wire.CodeTimeout,
		wire.CodeInternal, wire.CodeForbidden, wire.CodeReplicaFailed, wire.CodeStorageFailed,
		wire.CodeFeatureUnavailable,
	}
	for code, status := range statusOfCode {
		if !slices.Contains(codes, code) && status != http.StatusInternalServerError {
			t.Errorf("error code %q has no constant in package wire", code)
		}
	}
}
