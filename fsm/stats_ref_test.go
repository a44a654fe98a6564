package fsm

import (
	"fmt"
	"reflect"
	"sort"
)

// statsFromScratch is the reference for Stats: it computes every figure
// from every retained and live allocation, as Stats did before the
// aggregates (stats_agg.go) were kept. Tests compare the two.
func (s *State) statsFromScratch(f StatsFilter) []Stats {
	return s.statsFromScratchWith(f, s.statsEntry)
}

func (s *State) statsFromScratchWith(f StatsFilter, entry func(DeviceType, string, outcomeSummary) Stats) []Stats {
	buckets := s.allocBuckets(f.Type, f.Namespaces)
	pools := s.devicePools()
	out := []Stats{}
	for _, t := range DeviceTypes {
		if f.Type != "" && t != f.Type {
			continue
		}
		names := map[string]bool{}
		for p := range pools[t] {
			names[p] = true
		}
		for p := range buckets[t] {
			names[p] = true
		}
		if len(names) == 0 && f.Type == "" {
			continue
		}
		if f.Pool == "" || f.Pool == AllPools {
			var all []*Allocation
			for _, p := range sortedKeys(buckets[t]) {
				all = append(all, buckets[t][p]...)
			}
			sort.Slice(all, func(i, j int) bool { return all[i].Seq < all[j].Seq })
			out = append(out, entry(t, AllPools, s.summarize(all)))
		}
		if f.Pool == AllPools {
			continue
		}
		for _, p := range sortedKeys(names) {
			if f.Pool != "" && p != f.Pool {
				continue
			}
			out = append(out, entry(t, p, s.summarize(buckets[t][p])))
		}
	}
	return out
}

// CheckStatsAgainstScratch compares Stats with statsFromScratch with no
// filter and with the i-th (modulo their number) of the filters of every
// kind: each type, every pool's total, each pool, each namespace, two
// namespaces together, and a type, pool and namespace at once; i < 0
// checks them all. It is exported for the randomized log test.
func CheckStatsAgainstScratch(s *State, i int) error {
	pools, nss := map[string]bool{}, map[string]bool{}
	for _, d := range s.devices {
		pools[d.Pool] = true
	}
	note := func(a *Allocation) bool {
		pools[s.statsPool(a)] = true
		nss[a.Namespace] = true
		return true
	}
	s.history.each(note)
	for _, a := range s.allocs {
		note(a)
	}
	poolList, nsList := sortedKeys(pools), sortedKeys(nss)
	filters := []StatsFilter{{}, {Pool: AllPools}, {Pool: "no-such-pool"}, {Namespaces: []string{"no-such-ns"}}}
	for _, t := range DeviceTypes {
		filters = append(filters, StatsFilter{Type: t})
	}
	for _, p := range poolList {
		filters = append(filters, StatsFilter{Pool: p})
	}
	for i, n := range nsList {
		filters = append(filters, StatsFilter{Namespaces: []string{n}})
		if i > 0 {
			filters = append(filters, StatsFilter{Namespaces: []string{nsList[i-1], n, n}})
		}
		for _, p := range poolList {
			filters = append(filters, StatsFilter{Type: GPU, Pool: p, Namespaces: []string{n}})
		}
	}
	// The device figures (utilisation, fragmentation) are computed alike
	// on both sides: only every 64th check pays for them.
	read, ref := s.Stats, s.statsFromScratch
	if i >= 0 {
		filters = []StatsFilter{{}, filters[i%len(filters)]}
		if i%64 != 0 {
			allocOnly := func(t DeviceType, pool string, o outcomeSummary) Stats {
				return Stats{Type: t, Pool: pool, Counts: o.counts, Duration: o.duration, QueueWait: o.queueWait}
			}
			read = func(f StatsFilter) []Stats { return s.statsWith(f, allocOnly) }
			ref = func(f StatsFilter) []Stats { return s.statsFromScratchWith(f, allocOnly) }
		}
	}
	for _, f := range filters {
		got, want := read(f), ref(f)
		if !reflect.DeepEqual(got, want) {
			return fmt.Errorf("stats under %+v differ from a recomputation:\n got %+v\nwant %+v", f, got, want)
		}
	}
	return nil
}
