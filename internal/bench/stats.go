package bench

import (
	"math"
	"slices"
	"time"
)

// Latency summarises latencies in milliseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P95  float64 `json:"p95"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

// Percentile returns the nearest-rank p-th percentile (0 < p <= 100) of
// sorted: the smallest value with at least p % of the values at or below
// it. It is 0 for no values; p <= 0 gives the minimum.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	n := len(sorted)
	if n == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(n)))
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}

// Summarize sorts lat in place and returns its percentiles, maximum and
// mean in milliseconds.
func Summarize(lat []time.Duration) Latency {
	if len(lat) == 0 {
		return Latency{}
	}
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	return Latency{
		P50:  ms(Percentile(lat, 50)),
		P95:  ms(Percentile(lat, 95)),
		P99:  ms(Percentile(lat, 99)),
		Max:  ms(lat[len(lat)-1]),
		Mean: ms(sum / time.Duration(len(lat))),
	}
}

// ms is d in milliseconds, rounded to the microsecond.
func ms(d time.Duration) float64 {
	return math.Round(float64(d)/float64(time.Microsecond)) / 1000
}
