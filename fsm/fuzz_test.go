package fsm_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand"
	"reflect"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// fuzzSeedCommands are well-formed commands of every type, encoded, to
// start the corpus of FuzzDecode from.
func fuzzSeedCommands(p *populated) []fsm.Command {
	gpu := fsm.DeviceSpec{ID: "g9", Type: fsm.GPU, Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: 24}}}
	cpu := fsm.DeviceSpec{ID: "c9", Type: fsm.CPU, Shareable: true, Capabilities: fsm.Capabilities{Resources: fsm.Resources{ComputeUnits: 16}}}
	return []fsm.Command{
		&fsm.RegisterHost{Host: fsm.HostSpec{ID: "h3", Labels: map[string]string{"rack": "r2"}}, Devices: []fsm.DeviceSpec{gpu, cpu}},
		&fsm.RegisterHost{Host: fsm.HostSpec{ID: "h2"}, Devices: []fsm.DeviceSpec{gpu}},
		&fsm.RemoveHost{HostID: "h1"},
		&fsm.SetHostStatus{HostID: "h1", Up: false},
		&fsm.SetDeviceStatus{DeviceID: "g1", Status: fsm.Draining},
		&fsm.Allocate{Request: fsm.Request{
			Claims: []fsm.Claim{
				{Type: fsm.GPU, Count: 1, Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: 12}, Custom: map[string]string{"model": "a100|h100"}}},
				{Type: fsm.CPU, Count: 1, Amount: fsm.Resources{ComputeUnits: 2}},
			},
			Priority: 900, Timeout: time.Minute, LeaseTTL: time.Hour, Pool: "default",
			Labels: fsm.LabelSelector{Required: map[string]string{"rack": "r1"}, Preferred: map[string]string{"zone": "z1"}, Forbidden: map[string]string{"tier": "*"}},
		}},
		&fsm.Allocate{AllocationID: "0b5e0d43-5d6e-4c59-9d2f-2a1f0c7e8b11", Request: fsm.Request{Claims: []fsm.Claim{{Type: fsm.Memory, Count: 1, Amount: fsm.Resources{MemoryGB: 300}}}}},
		&fsm.Release{AllocationID: p.active},
		&fsm.Renew{AllocationID: p.active, TTL: time.Minute},
		&fsm.Cancel{AllocationID: p.pending},
		&fsm.SetPolicy{DeviceType: fsm.GPU, Config: fsm.PolicyConfig{Policy: fsm.PriorityBased, PreemptionGap: 5}},
		&fsm.SetPolicy{Pool: "p1", Config: fsm.PolicyConfig{Policy: fsm.FragmentationAware}},
		&fsm.SetRetention{Retention: fsm.Retention{MaxCount: 1, MaxAge: time.Minute}},
		&fsm.Tick{},
	}
}

// readAlike checks that Decode reads what Encode writes as encoding/json
// does, on the command encoding/json reads from raw (if any) encoded
// again: a log holds only Encode's output, and servers of builds before
// Decode's own decoder apply it with encoding/json.
func readAlike(t *testing.T, raw []byte) {
	t.Helper()
	old, err := fsm.DecodeWithEncodingJSON(raw)
	if err != nil {
		return
	}
	entry, err := fsm.Encode(old)
	if err != nil {
		return // NaN or Inf: refused before it is proposed
	}
	want, err := fsm.DecodeWithEncodingJSON(entry)
	if err != nil {
		t.Fatalf("encoding/json does not read Encode's %s: %v", entry, err)
	}
	got, err := fsm.Decode(entry)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Decode reads %s otherwise than encoding/json: %v\n%#v\n%#v", entry, err, got, want)
	}
}

// FuzzDecode decodes arbitrary bytes as a log entry; what decodes is
// applied to a small populated state, which must hold together, and must
// survive a snapshot and restore. Nothing may panic, and Decode must read
// Encode's output as encoding/json does (readAlike).
func FuzzDecode(f *testing.F) {
	seedState := newPopulated(f)
	var batch [][]byte
	for _, c := range fuzzSeedCommands(seedState) {
		fsm.Stamp(c, time.Unix(0, seedState.now+int64(time.Second)))
		raw, err := fsm.Encode(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
		if fsm.Batchable(c) {
			batch = append(batch, raw)
		}
	}
	f.Add(fsm.EncodeBatch(batch))
	f.Add([]byte{})
	f.Add([]byte{byte(fsm.AllocateType), '{', '}'})
	f.Add([]byte{byte(fsm.ACLTokenDeleteType) + 1})
	f.Fuzz(func(t *testing.T, raw []byte) {
		readAlike(t, raw)
		c, err := fsm.Decode(raw)
		if err != nil {
			if !errors.Is(err, fsm.ErrInvalid) && !errors.Is(err, fsm.ErrUnknownCommand) {
				t.Fatalf("Decode error %v is neither invalid nor unknown command", err)
			}
			return
		}
		p := newPopulated(t)
		res := p.s.Apply(p.idx+1, c)
		if res.Err != nil {
			var e *fsm.Error
			if !errors.As(res.Err, &e) {
				t.Fatalf("Apply error %v is not an *fsm.Error", res.Err)
			}
		}
		if err := p.s.CheckInvariants(); err != nil {
			t.Fatalf("after %s: %v", raw, err)
		}
		// Whatever the command did, time passing must be safe too.
		tick := &fsm.Tick{}
		fsm.Stamp(tick, p.s.Now().Add(2*time.Hour))
		p.s.Apply(p.idx+2, tick)
		if err := p.s.CheckInvariants(); err != nil {
			t.Fatalf("tick after %s: %v", raw, err)
		}
		snap := p.s.SnapshotBytes()
		r, err := fsm.Restore(bytes.NewReader(snap))
		if err != nil {
			t.Fatalf("state reached by %s does not restore: %v", raw, err)
		}
		if !bytes.Equal(r.SnapshotBytes(), snap) {
			t.Fatalf("state reached by %s restores to another snapshot", raw)
		}
	})
}

// FuzzRestore restores arbitrary bytes as a snapshot. Restore must refuse
// what does not hold together with ErrSnapshot, and never panic; a state it
// accepts must hold together, snapshot to bytes that restore to the same
// bytes, and take commands.
func FuzzRestore(f *testing.F) {
	p := newPopulated(f)
	f.Add(p.s.SnapshotBytes())
	f.Add(fsm.New().SnapshotBytes())
	// A state after a short random log: queue, history, request IDs,
	// cursors and shapes all in use.
	g := newCmdGen(rand.New(rand.NewSource(1)))
	s := fsm.New()
	v := observe(s)
	for i := 1; i <= 300; i++ {
		st := g.next(s, v)
		res := s.Apply(uint64(i), st.cmd)
		g.learn(&st, uint64(i), res, s)
		v = observe(s)
	}
	f.Add(s.SnapshotBytes())
	f.Add(withPendingCount(f, fsm.SnapshotV1Bytes(p.s), -1))
	f.Add(fsm.SnapshotV1Bytes(p.s)) // format 1, as older builds wrote it
	f.Add(fsm.SnapshotV1Bytes(s))
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":1,"hosts":[{"id":"h","up":true,"devices":["d"]}],"devices":[null]}`))
	f.Add([]byte("null"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := fsm.Restore(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, fsm.ErrSnapshot) {
				t.Fatalf("Restore error %v is not ErrSnapshot", err)
			}
			return
		}
		if err := s.CheckInvariants(); err != nil {
			t.Fatalf("restored state: %v", err)
		}
		snap := s.SnapshotBytes()
		again, err := fsm.Restore(bytes.NewReader(snap))
		if err != nil {
			t.Fatalf("snapshot of a restored state does not restore: %v", err)
		}
		if !bytes.Equal(again.SnapshotBytes(), snap) {
			t.Fatalf("snapshot of a restored state restores to other bytes")
		}
		// The restored state takes commands: new requests, releases (which
		// re-examine the queue), cancels and a tick.
		idx := s.LastIndex()
		apply := func(c fsm.Command, at time.Time) fsm.Result {
			idx++
			fsm.Stamp(c, at)
			r := s.Apply(idx, c)
			if err := s.CheckInvariants(); err != nil {
				t.Fatalf("after %T on a restored state: %v", c, err)
			}
			return r
		}
		apply(&fsm.Allocate{Request: fsm.Request{Claims: []fsm.Claim{{Type: fsm.GPU, Count: 1}}, Timeout: time.Minute}}, s.Now())
		apply(&fsm.Allocate{Request: fsm.Request{Claims: []fsm.Claim{{Type: fsm.CPU, Count: 1, Amount: fsm.Resources{ComputeUnits: 1}}}}}, s.Now())
		for live := s.Live(); len(live) > 0; live = s.Live() {
			a := live[0]
			for _, l := range live {
				if l.Status == fsm.Active {
					a = l
					break
				}
			}
			// In the allocation's namespace: it is not found in another.
			var c fsm.Command = &fsm.Release{Meta: fsm.Meta{Namespace: a.Namespace}, AllocationID: a.ID}
			if a.Status == fsm.Pending {
				c = &fsm.Cancel{Meta: fsm.Meta{Namespace: a.Namespace}, AllocationID: a.ID}
			}
			if r := apply(c, s.Now()); r.Err != nil {
				t.Fatalf("ending live allocation %s of a restored state: %v", a.ID, r.Err)
			}
		}
		apply(&fsm.Tick{}, s.Now().Add(time.Hour))
	})
}

// withPendingCount rewrites a format 1 snapshot so that the first claim of every
// pending allocation asks for n devices.
func withPendingCount(tb testing.TB, snap []byte, n int) []byte {
	var m map[string]any
	if err := json.Unmarshal(snap, &m); err != nil {
		tb.Fatal(err)
	}
	live, _ := m["live"].([]any)
	for _, a := range live {
		if a, ok := a.(map[string]any); ok && a["status"] == string(fsm.Pending) {
			a["request"].(map[string]any)["claims"].([]any)[0].(map[string]any)["count"] = n
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}
