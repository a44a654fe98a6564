package fsm

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// shapeKeyFmt is how Shape keys were first written, with fmt. Keys
// order the typical shapes, so a new way of writing them must give the
// same strings on every replica, old and new.
func shapeKeyFmt(sh Shape) string {
	var b strings.Builder
	for _, c := range sh.Claims {
		fmt.Fprintf(&b, "%s/%d/%s/%v/%v;", c.Type, c.Count, c.Pool, c.Capabilities.vec(), c.Amount.vec())
		for _, k := range sortedKeys(c.Capabilities.Custom) {
			fmt.Fprintf(&b, "%s=%s,", k, c.Capabilities.Custom[k])
		}
	}
	return b.String()
}

func TestShapeKeyAsFmtWroteIt(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	floats := []float64{0, 1, 80, 0.5, 1e6, 1e21, 123456789, 1e-5, 0.0001, 2.5e-7, math.MaxFloat64,
		math.SmallestNonzeroFloat64, math.Inf(1), math.NaN(), math.Copysign(0, -1), -3.25}
	f := func() float64 {
		if rng.IntN(3) == 0 {
			return rng.Float64() * math.Pow(10, float64(rng.IntN(40)-20))
		}
		return floats[rng.IntN(len(floats))]
	}
	res := func() Resources {
		return Resources{MemoryGB: f(), ComputeUnits: f(), StorageGB: f(), BandwidthGbps: f()}
	}
	for i := range 20000 {
		var sh Shape
		for range 1 + rng.IntN(3) {
			c := Claim{Type: DeviceTypes[rng.IntN(len(DeviceTypes))], Count: rng.IntN(20) - 2, Pool: []string{"", "default", "a/b"}[rng.IntN(3)], Amount: res()}
			c.Capabilities.Resources = res()
			if rng.IntN(2) == 0 {
				c.Capabilities.Custom = map[string]string{"arch": "sm90", "nv=link": "x,y"}
			}
			sh.Claims = append(sh.Claims, c)
		}
		if got, want := sh.key(), shapeKeyFmt(sh); got != want {
			t.Fatalf("shape %d: key %q, fmt wrote %q", i, got, want)
		}
	}
}

// classKeyFmt is how class keys were first written, with fmt.
func classKeyFmt(d *Device) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%t|%v|", d.Type, d.Pool, d.Shareable, d.Capabilities.vec())
	for _, k := range sortedKeys(d.Capabilities.Custom) {
		fmt.Fprintf(&b, "%q=%q,", k, d.Capabilities.Custom[k])
	}
	b.WriteByte('|')
	for _, k := range sortedKeys(d.Labels) {
		fmt.Fprintf(&b, "%q=%q,", k, d.Labels[k])
	}
	return b.String()
}

// TestClassKeyAsFmtWroteIt checks classKey against the fmt it replaced
// over random devices: capabilities of every size and sign, NaN and
// infinities, and custom values and labels that need quoting.
func TestClassKeyAsFmtWroteIt(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	floats := []float64{0, 1, 80, 0.5, 1e6, 1e21, 1e-5, math.MaxFloat64, math.Inf(1), math.NaN(), math.Copysign(0, -1), -3.25}
	f := func() float64 {
		if rng.IntN(3) == 0 {
			return rng.Float64() * math.Pow(10, float64(rng.IntN(40)-20))
		}
		return floats[rng.IntN(len(floats))]
	}
	strs := []string{"", "a", "sm90", "x,y", `q"uote`, "tab\there", "é", "\x00\xff", "|=,"}
	m := func() map[string]string {
		out := map[string]string{}
		for range rng.IntN(4) {
			out[strs[rng.IntN(len(strs))]] = strs[rng.IntN(len(strs))]
		}
		return out
	}
	for i := range 20000 {
		d := &Device{DeviceSpec: DeviceSpec{Type: DeviceTypes[rng.IntN(len(DeviceTypes))], Pool: strs[rng.IntN(len(strs))], Shareable: rng.IntN(2) == 0, Labels: m()}}
		d.Capabilities.Resources = Resources{MemoryGB: f(), ComputeUnits: f(), StorageGB: f(), BandwidthGbps: f()}
		d.Capabilities.Custom = m()
		if got, want := classKey(d), classKeyFmt(d); got != want {
			t.Fatalf("device %d: key %q, fmt wrote %q", i, got, want)
		}
	}
}
