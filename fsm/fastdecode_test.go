package fsm

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
)

// randomWrite is an allocation write with every field drawn at random,
// mostly from values the fast path reads, sometimes from ones it leaves
// to the general decoder (escapes, non-ASCII, maps, exponents).
func randomWrite(rng *rand.Rand) Command {
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	str := func() string {
		if rng.IntN(20) == 0 {
			return pick(`q"uote`, `back\slash`, "µ", "\u2028", "tab\t", "\xff")
		}
		return pick("", "", "a", "default", "<&>", "959285df-1961-540f-9a27-c21c22c6a7bb")
	}
	num := func() int64 {
		return []int64{0, 0, 1, 7, -3, 1000, math.MaxInt64, math.MinInt64, 1_735_689_600_123_456_789}[rng.IntN(9)]
	}
	float := func() float64 {
		return []float64{0, 0, 0, 1, 40, 80, 0.5, 123.456, 1e-7, 1e21, 1e20, -2.5, 5e-324, math.MaxFloat64, math.Copysign(0, -1)}[rng.IntN(15)]
	}
	strMap := func() map[string]string {
		switch rng.IntN(20) {
		case 0:
			return map[string]string{}
		case 1:
			return map[string]string{str(): str(), "k": "v"}
		}
		return nil
	}
	resources := func() Resources { return Resources{float(), float(), float(), float()} }
	meta := Meta{RequestID: str(), Namespace: str(), Time: num(), Digest: str()}
	switch rng.IntN(4) {
	case 0:
		return &Release{Meta: meta, AllocationID: str()}
	case 1:
		return &Cancel{Meta: meta, AllocationID: str()}
	case 2:
		return &Renew{Meta: meta, AllocationID: str(), TTL: time.Duration(num())}
	}
	a := &Allocate{Meta: meta, AllocationID: str()}
	q := &a.Request
	switch n := rng.IntN(5); n {
	case 0:
	case 1:
		q.Claims = []Claim{}
	default:
		for range n - 1 {
			q.Claims = append(q.Claims, Claim{Type: DeviceType(pick("GPU", "CPU", "memory", "x\"y")), Count: int(num()), Pool: str(),
				Capabilities: Capabilities{Resources: resources(), Custom: strMap()}, Amount: resources(), Topology: pick("", "", "nvlink", "é")})
		}
	}
	q.Priority, q.Timeout, q.LeaseTTL, q.Pool = int(num()), time.Duration(num()), time.Duration(num()), str()
	q.Labels = LabelSelector{Required: strMap(), Preferred: strMap(), Forbidden: strMap()}
	q.MaxHosts, q.MinPerHost, q.Same, q.Host = int(num()), int(num()), str(), str()
	return a
}

// checkFastDecode decodes payload as a command of type t with the fast
// path and with encoding/json/v2: when the fast path reads it, the
// general decoder must read it too, to the same command.
func checkFastDecode(t *testing.T, typ CommandType, payload []byte) (fast bool) {
	t.Helper()
	got, want := newCommand(typ), newCommand(typ)
	if got == nil || !Batchable(got) {
		return false
	}
	if !decodeFast(payload, got) {
		if !reflect.DeepEqual(got, newCommand(typ)) {
			t.Fatalf("the fast path gave up on %q but changed the command: %+v", payload, got)
		}
		return false
	}
	if err := jsonv2.Unmarshal(payload, want, decodeOptions); err != nil {
		t.Fatalf("the fast path read %q, which the general decoder refuses: %v", payload, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q\nfast path: %#v\ngeneral:   %#v", payload, got, want)
	}
	return true
}

// TestFastDecodeIsTheDecoder: on random allocation writes, as Encode
// writes them, the fast path reads what the general decoder reads, and
// it reads most of them.
func TestFastDecodeIsTheDecoder(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	const n = 5000
	fast := 0
	for range n {
		c := randomWrite(rng)
		b, err := Encode(c)
		if err != nil {
			continue // a NaN or infinity: refused before any decoder
		}
		if checkFastDecode(t, c.Type(), b[1:]) {
			fast++
		}
	}
	t.Logf("fast %d of %d", fast, n)
	if fast < n/10 || fast == n {
		t.Fatalf("the fast path read %d of %d writes: the check covers too little", fast, n)
	}
}

// FuzzFastDecode: whatever the input, what the fast path reads it reads
// as the general decoder does.
func FuzzFastDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 16 {
		c := randomWrite(rng)
		if b, err := Encode(c); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 0 {
			checkFastDecode(t, CommandType(b[0]), b[1:])
		}
	})
}

// TestFastEncodeIsEncodingJSON: on random allocation writes, encodeFast
// writes what encoding/json writes, and refuses what it refuses.
func TestFastEncodeIsEncodingJSON(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	for range 5000 {
		c := randomWrite(rng)
		if rng.IntN(50) == 0 {
			if a, ok := c.(*Allocate); ok && len(a.Request.Claims) > 0 {
				a.Request.Claims[0].Amount.MemoryGB = math.NaN()
			}
		}
		want, err := json.Marshal(c)
		got, ok := encodeFast(nil, c)
		switch {
		case ok != (err == nil):
			t.Fatalf("%#v: encodeFast ok=%v, encoding/json error %v", c, ok, err)
		case ok && string(got) != string(want):
			t.Fatalf("encodeFast wrote\n%s\nencoding/json\n%s", got, want)
		}
	}
	if _, ok := encodeFast(nil, &Tick{}); ok {
		t.Fatal("encodeFast wrote a Tick")
	}
}

// fillAll sets every field v reaches to a value other than its zero.
func fillAll(t *testing.T, v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Int, reflect.Int64:
		v.SetInt(3)
	case reflect.Float64:
		v.SetFloat(2.5)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillAll(t, v.Field(i))
			}
		}
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillAll(t, v.Index(0))
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		key, val := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillAll(t, key)
		fillAll(t, val)
		m.SetMapIndex(key, val)
		v.Set(m)
	default:
		t.Fatalf("fillAll: a %s field: teach it, and encodeFast, this kind", v.Type())
	}
}

// TestFastEncodeWritesEveryField: with every field set, encodeFast
// still writes what encoding/json writes, so a field added to a command
// and not to encodeFast fails here; and the fast path reads it back, or
// leaves it to the general decoder.
func TestFastEncodeWritesEveryField(t *testing.T) {
	for _, c := range []Command{&Allocate{}, &Release{}, &Renew{}, &Cancel{}} {
		fillAll(t, reflect.ValueOf(c).Elem())
		want, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := encodeFast(nil, c)
		if !ok || string(got) != string(want) {
			t.Fatalf("%T: encodeFast wrote (ok=%v)\n%s\nencoding/json\n%s", c, ok, got, want)
		}
		checkFastDecode(t, c.Type(), got)
	}
}
