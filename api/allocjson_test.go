package api

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

// Values the filler draws from: the ones encoding/json writes in a way
// of its own (escapes, HTML characters, invalid UTF-8, exponents, the
// zero it leaves out, values it refuses) beside ordinary ones.
var (
	fillStrings = []string{"", "", "a", "g00017", "959285df-1961-540f-9a27-c21c22c6a7bb", "BestFit", "released",
		`quo"te`, `back\slash`, "<b>&amp;</b>", "a&b", "x>y", "tab\there", "nl\n", "\x00\x1f", "del\x7f", "µs ü 日本", "\xff\xfe bad utf-8",
		"line\u2028sep\u2029", "\U0001F600"}
	fillFloats = []float64{0, 0, math.Copysign(0, -1), 1, 80, 0.1, 123.456, 1e-6, 9.99e-7, 1e-7, 5e-324, 1e20, 1e21,
		1.5e300, -2.5, math.MaxFloat64, -1e-9}
	fillInts      = []int64{0, 0, 1, 7, -3, 1 << 40, math.MaxInt64, math.MinInt64}
	fillDurations = []time.Duration{0, 0, time.Nanosecond, 1500 * time.Nanosecond, 90 * time.Second, -5 * time.Second, 26 * time.Hour}
	fillTimes     = []time.Time{{}, {}, time.Unix(0, 1_735_689_600_123_456_789).UTC(), time.Unix(1_735_689_600, 0).UTC(),
		time.Unix(1_735_689_600, 5000).In(time.FixedZone("x", 5*3600+30*60)), time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC)}
)

var (
	durationType = reflect.TypeFor[wire.Duration]()
	timeType     = reflect.TypeFor[time.Time]()
)

// fill sets every field v reaches, through reflection, to a value drawn
// at random; rare is how often it draws a value encoding/json refuses.
func fill(rng *rand.Rand, v reflect.Value, depth int, rare bool) {
	switch {
	case v.Type() == timeType:
		t := fillTimes[rng.IntN(len(fillTimes))]
		if rare && rng.IntN(20) == 0 {
			t = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
		}
		v.Set(reflect.ValueOf(t))
		return
	case v.Type() == durationType:
		v.SetInt(int64(fillDurations[rng.IntN(len(fillDurations))]))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(fillStrings[rng.IntN(len(fillStrings))])
	case reflect.Bool:
		v.SetBool(rng.IntN(2) == 0)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n := fillInts[rng.IntN(len(fillInts))]
		if v.OverflowInt(n) {
			n = int64(rng.IntN(100))
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n := uint64(fillInts[rng.IntN(len(fillInts))])
		if v.OverflowUint(n) {
			n = uint64(rng.IntN(100))
		}
		v.SetUint(n)
	case reflect.Float32, reflect.Float64:
		f := fillFloats[rng.IntN(len(fillFloats))]
		if rare && rng.IntN(40) == 0 {
			f = math.NaN()
		}
		v.SetFloat(f)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(rng, v.Field(i), depth+1, rare)
			}
		}
	case reflect.Slice:
		switch k := rng.IntN(4); {
		case k == 0 || depth > 6:
		case k == 1:
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
		default:
			s := reflect.MakeSlice(v.Type(), k-1, k-1)
			for i := range k - 1 {
				fill(rng, s.Index(i), depth+1, rare)
			}
			v.Set(s)
		}
	case reflect.Map:
		switch k := rng.IntN(4); {
		case k == 0 || depth > 6:
		case k == 1:
			v.Set(reflect.MakeMap(v.Type()))
		default:
			m := reflect.MakeMap(v.Type())
			for range k {
				key, val := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
				fill(rng, key, depth+1, rare)
				fill(rng, val, depth+1, rare)
				m.SetMapIndex(key, val)
			}
			v.Set(m)
		}
	case reflect.Pointer:
		if rng.IntN(2) == 0 && depth <= 6 {
			p := reflect.New(v.Type().Elem())
			fill(rng, p.Elem(), depth+1, rare)
			v.Set(p)
		}
	}
}

// checkAllocationJSON fills an allocation from seed and compares what
// appendAllocation writes with what encoding/json's Encoder writes.
func checkAllocationJSON(t *testing.T, seed uint64) (fast bool) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed>>32|1))
	var a wire.Allocation
	fill(rng, reflect.ValueOf(&a).Elem(), 0, seed%3 == 0)
	var want bytes.Buffer
	err := json.NewEncoder(&want).Encode(&a)
	got, ok := appendAllocation(nil, &a)
	switch {
	case ok != (err == nil):
		t.Fatalf("seed %d: appendAllocation ok=%v, encoding/json error %v", seed, ok, err)
	case ok && !bytes.Equal(append(got, '\n'), want.Bytes()):
		t.Fatalf("seed %d: appendAllocation wrote\n%s\nencoding/json\n%s", seed, got, want.Bytes())
	}
	return ok
}

// TestAllocationJSONIsEncodingJSON: the answer to an allocation write
// reads as encoding/json would have written it, byte for byte, whatever
// the fields hold; where encoding/json refuses the value, so does
// appendAllocation, and the answer is left to encoding/json.
func TestAllocationJSONIsEncodingJSON(t *testing.T) {
	fast := 0
	const n = 3000
	for seed := range uint64(n) {
		if checkAllocationJSON(t, seed) {
			fast++
		}
	}
	if fast < n/2 || fast == n {
		t.Fatalf("%d of %d allocations written directly: the check covers too little", fast, n)
	}
}

func FuzzAllocationJSON(f *testing.F) {
	for seed := range uint64(8) {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) { checkAllocationJSON(t, seed) })
}

// BenchmarkAllocationJSON is the answer to a release of one GPU, written
// by encoding/json and by appendAllocation.
func BenchmarkAllocationJSON(b *testing.B) {
	at := time.Unix(0, 1_735_689_600_123_456_789).UTC()
	a := wire.Allocation{ID: "959285df-1961-540f-9a27-c21c22c6a7bb", RequestID: "eda99f14-d265-4b04-aadc-6fb94495286b",
		Namespace: "default", Status: "released", Policy: "BestFit", Host: "h1", Seq: 1, CreateIndex: 2, ModifyIndex: 3,
		Request:     wire.Request{Claims: []wire.Claim{{Type: "GPU", Count: 1, Capabilities: wire.Capabilities{Resources: wire.Resources{MemoryGB: 40}}}}},
		Devices:     []wire.Assignment{{DeviceID: "g00000", Amount: wire.Resources{MemoryGB: 80}}},
		RequestedAt: at, AllocatedAt: at, EndedAt: at, Reason: "released"}
	var buf bytes.Buffer
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf.Reset()
			_ = json.NewEncoder(&buf).Encode(&a)
		}
	})
	b.Run("appendAllocation", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			buf.Reset()
			out, _ := appendAllocation(make([]byte, 0, 1024), &a)
			buf.Write(append(out, '\n'))
		}
	})
}
