package jsonappend

import (
	"encoding/json"
	"math"
	"testing"
)

func TestStringIsEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "a", "959285df-1961-540f-9a27-c21c22c6a7bb", `q"uote`, `back\slash`, "<b>", "a&b", "x>y",
		"tab\t", "nl\n", "\x00\x1f", "del\x7f", "µs ü 日本", "\xff\xfe bad", "line\u2028sep\u2029", "\U0001F600", "~ !#$%"} {
		want, _ := json.Marshal(s)
		if got := String(nil, s); string(got) != string(want) {
			t.Errorf("String(%q) = %s, encoding/json %s", s, got, want)
		}
	}
}

func TestFloatIsEncodingJSON(t *testing.T) {
	for _, f := range []float64{0, math.Copysign(0, -1), 1, 80, 0.1, 123.456, 1e-6, 9.99e-7, 1e-7, 5e-324, 1e20, 1e21,
		1.5e300, -2.5, -1e-9, math.MaxFloat64, -math.MaxFloat64, 1e-10, 12345678.9} {
		want, _ := json.Marshal(f)
		if got, ok := Float(nil, f); !ok || string(got) != string(want) {
			t.Errorf("Float(%v) = %s (ok=%v), encoding/json %s", f, got, ok, want)
		}
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, ok := Float(nil, f); ok {
			t.Errorf("Float(%v) is ok; encoding/json refuses it", f)
		}
	}
}

func FuzzStringAndFloat(f *testing.F) {
	f.Add("a<b", 1.5)
	f.Fuzz(func(t *testing.T, s string, v float64) {
		want, _ := json.Marshal(s)
		if got := String(nil, s); string(got) != string(want) {
			t.Fatalf("String(%q) = %s, encoding/json %s", s, got, want)
		}
		want, err := json.Marshal(v)
		if got, ok := Float(nil, v); ok != (err == nil) || ok && string(got) != string(want) {
			t.Fatalf("Float(%v) = %s (ok=%v), encoding/json %s (%v)", v, got, ok, want, err)
		}
	})
}
