package main

import (
	"bytes"
	"strings"
	"testing"
)

// The table holds the medians of each system and client count, and dmsc's
// ratios to etcd at the same count.
func TestTable(t *testing.T) {
	var out bytes.Buffer
	b := &runner{o: options{rounds: 3}, out: &out}
	for i, w := range []float64{4000, 3000, 5000} {
		b.results = append(b.results,
			runResult{System: "etcd", Clients: 64, Round: i + 1, Writes: w, P50: 10, P99: 40 + float64(i)},
			runResult{System: "dmsc", Clients: 64, Round: i + 1, Writes: 2 * w, P50: 5, P99: 20 + float64(i), CPU: 0.3, ServersCPU: 0.2},
			runResult{System: "etcd", Clients: 256, Round: i + 1, Writes: 6000, P99: 100},
			runResult{System: "dmsc", Clients: 256, Round: i + 1, Writes: 3000, P99: 150})
	}
	b.table()
	got := out.String()
	for _, want := range []string{
		"| etcd | 64 | 4000 | 10.0 | 41.0 | 0.000 (0.000) |  |  |",
		"| dmsc | 64 | 8000 | 5.0 | 21.0 | 0.300 (0.200) | 2.00× | 0.51× |",
		"| dmsc | 256 | 3000 | 0.0 | 150.0 | 0.000 (0.000) | 0.50× | 1.50× |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the table lacks %q:\n%s", want, got)
		}
	}
	if i, j := strings.Index(got, "| etcd | 256"), strings.Index(got, "| dmsc | 64"); i < j {
		t.Errorf("rows not ordered by client count:\n%s", got)
	}
}

func TestMedian(t *testing.T) {
	rs := func(ws ...float64) []runResult {
		var out []runResult
		for _, w := range ws {
			out = append(out, runResult{Writes: w})
		}
		return out
	}
	writes := func(r runResult) float64 { return r.Writes }
	for _, tc := range []struct {
		in   []runResult
		want float64
	}{
		{rs(3, 1, 2), 2},
		{rs(4, 1, 3, 2), 2.5},
		{rs(7), 7},
		{nil, 0},
	} {
		if got := median(tc.in, writes); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
