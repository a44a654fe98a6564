package fsm

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"testing"
	"time"
)

// statsAt sets the harness clock so that the next command lands exactly
// sec seconds after t0.
func statsAt(h *harness, sec float64) {
	h.now = t0 + int64(sec*1e9) - int64(time.Millisecond)
}

// statsApply applies a command at sec seconds after t0.
func statsApply(h *harness, sec float64, c Command) Result {
	h.t.Helper()
	statsAt(h, sec)
	return h.apply(c)
}

// statsMust applies a command at sec seconds after t0 and fails on error.
func statsMust(h *harness, sec float64, c Command) Result {
	h.t.Helper()
	statsAt(h, sec)
	return h.must(c)
}

func gpuIn(id, pool string, memGB float64) DeviceSpec {
	d := gpu(id, memGB)
	d.Pool = pool
	return d
}

func withTimeout(c *Allocate, d time.Duration) *Allocate {
	c.Request.Timeout = d
	return c
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func findStats(t *testing.T, list []Stats, typ DeviceType, pool string) Stats {
	t.Helper()
	for _, s := range list {
		if s.Type == typ && s.Pool == pool {
			return s
		}
	}
	t.Fatalf("no stats for %s/%q in %+v", typ, pool, list)
	return Stats{}
}

func TestSummarizeDurations(t *testing.T) {
	sec := func(xs ...int) []int64 {
		out := make([]int64, len(xs))
		for i, x := range xs {
			out[i] = int64(x) * int64(time.Second)
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100..1, unsorted on purpose
	}
	for _, tc := range []struct {
		name string
		in   []int64
		want DurationStats
	}{
		{"empty", nil, DurationStats{}},
		{"one", sec(7), DurationStats{Count: 1, Mean: 7, P50: 7, P95: 7}},
		{"four", sec(40, 10, 30, 20), DurationStats{Count: 4, Mean: 25, P50: 20, P95: 40}},
		{"five", sec(10, 20, 30, 40, 40), DurationStats{Count: 5, Mean: 28, P50: 30, P95: 40}},
		{"hundred", sec(hundred...), DurationStats{Count: 100, Mean: 50.5, P50: 50, P95: 95}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := summarizeDurations(tc.in); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestStatsOutcomes(t *testing.T) {
	h := newHarness(t)
	statsMust(h, 0, host("h1", gpu("g1", 16), gpu("g2", 16), gpu("g3", 16)))
	a1 := statsMust(h, 0, gpuReq(8)).Allocation.ID // 0 .. 10
	a2 := statsMust(h, 1, gpuReq(8)).Allocation.ID // 1 .. 21
	a3 := statsMust(h, 2, gpuReq(8)).Allocation.ID // 2 .. 32
	if r := statsApply(h, 3, gpuReq(8)); !errors.Is(r.Err, ErrNoCapacity) {
		t.Fatalf("4th request: %v, want no capacity", r.Err)
	}
	statsMust(h, 4, withTimeout(gpuReq(8), 2*time.Second))                // times out at 6
	a7 := statsMust(h, 5, withTimeout(gpuReq(8), time.Minute)).Allocation // placed at 10 .. 50
	statsMust(h, 7, &Tick{})
	statsMust(h, 10, &Release{AllocationID: a1})
	statsMust(h, 21, &Release{AllocationID: a2})
	statsMust(h, 32, &Release{AllocationID: a3})
	statsMust(h, 50, &Release{AllocationID: a7.ID})
	statsMust(h, 60, gpuReq(8)) // active 60 .. now
	statsMust(h, 100, &Tick{})

	got := h.s.Stats(StatsFilter{})
	if len(got) != 3 || got[0].Pool != AllPools || got[1].Pool != "" || got[2].Pool != DefaultPool {
		t.Fatalf("entries %+v, want GPU total, GPU \"\", GPU default", got)
	}
	total := got[0]
	wantCounts := OutcomeCounts{Total: 7, Successful: 5, Released: 4, Failed: 1, TimedOut: 1, Active: 1}
	if total.Counts != wantCounts {
		t.Fatalf("counts %+v, want %+v", total.Counts, wantCounts)
	}
	if !near(total.SuccessRate, 5.0/7) {
		t.Fatalf("success rate %v, want 5/7", total.SuccessRate)
	}
	if want := (DurationStats{Count: 5, Mean: 28, P50: 30, P95: 40}); total.Duration != want {
		t.Fatalf("duration %+v, want %+v", total.Duration, want)
	}
	if want := (DurationStats{Count: 5, Mean: 1, P50: 0, P95: 5}); total.QueueWait != want {
		t.Fatalf("queue wait %+v, want %+v", total.QueueWait, want)
	}
	if !near(total.Utilisation, 1.0/3) {
		t.Fatalf("utilisation %v, want 1/3", total.Utilisation)
	}
	if want := (DeviceCounts{Total: 3, Available: 3, InUse: 1}); total.Devices != want {
		t.Fatalf("devices %+v, want %+v", total.Devices, want)
	}
	if total.Policy.Policy != BestFit {
		t.Fatalf("policy %v, want BestFit", total.Policy)
	}
	// Never placed and no pool asked: the "" pool. Placed: the device's pool.
	unplaced := got[1]
	if want := (OutcomeCounts{Total: 2, Failed: 1, TimedOut: 1}); unplaced.Counts != want || unplaced.SuccessRate != 0 {
		t.Fatalf("unplaced %+v, want %+v and rate 0", unplaced.Counts, want)
	}
	if unplaced.Devices.Total != 0 || unplaced.Duration.Count != 0 {
		t.Fatalf("unplaced holds devices or durations: %+v", unplaced)
	}
	def := got[2]
	if want := (OutcomeCounts{Total: 5, Successful: 5, Released: 4, Active: 1}); def.Counts != want || def.SuccessRate != 1 {
		t.Fatalf("default %+v, want %+v and rate 1", def.Counts, want)
	}
	if def.Duration != total.Duration || def.Devices != total.Devices {
		t.Fatalf("default pool %+v differs from the total %+v", def, total)
	}
}

// Released, failed and timed-out requests give the success rate and the
// durations of the released ones.
func TestStatsSuccessRateExample(t *testing.T) {
	h := newHarness(t)
	statsMust(h, 0, host("h1", gpu("g1", 16)))
	for i := 0; i < 3; i++ {
		id := statsMust(h, float64(10*i), gpuReq(8)).Allocation.ID
		statsMust(h, float64(10*i+1+i), &Release{AllocationID: id}) // 1, 2, 3 s
	}
	hold := statsMust(h, 40, gpuReq(8)).Allocation.ID
	statsApply(h, 41, gpuReq(8))                             // failed
	statsMust(h, 42, withTimeout(gpuReq(8), time.Second))    // timed out
	statsMust(h, 44, &Tick{})                                //
	statsMust(h, 45, &Release{AllocationID: hold})           // a 4th released, 5 s
	got := h.s.Stats(StatsFilter{Type: GPU, Pool: AllPools}) //
	if len(got) != 1 {
		t.Fatalf("want only the total, got %+v", got)
	}
	s := got[0]
	if s.Counts.Released != 4 || s.Counts.Failed != 1 || s.Counts.TimedOut != 1 || !near(s.SuccessRate, 4.0/6) {
		t.Fatalf("counts %+v rate %v, want 4 released, 1 failed, 1 timed out, rate 4/6", s.Counts, s.SuccessRate)
	}
	if want := (DurationStats{Count: 4, Mean: 2.75, P50: 2, P95: 5}); s.Duration != want {
		t.Fatalf("duration %+v, want %+v", s.Duration, want)
	}
}

func TestStatsFiltersAndAttribution(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpuIn("g1", "train", 16), gpu("g2", 16)))
	h.must(&RegisterHost{Host: HostSpec{ID: "h2"}, Devices: []DeviceSpec{
		{ID: "c1", Type: CPU, Pool: "batch", Shareable: true, Capabilities: Capabilities{Resources: Resources{ComputeUnits: 16}}},
		gpuIn("g3", "batch", 16),
	}})
	h.must(&SetPolicy{Pool: "train", Config: PolicyConfig{Policy: WorstFit}})
	// A CPU+GPU request counts under CPU, in the pool of its first device.
	multi := h.must(&Allocate{Request: Request{Claims: []Claim{
		{Type: CPU, Count: 1, Amount: Resources{ComputeUnits: 4}},
		{Type: GPU, Count: 1},
	}}}).Allocation
	if multi.Host != "h2" {
		t.Fatalf("multi-claim request on %s, want h2", multi.Host)
	}
	trainReq := gpuReq(8)
	trainReq.Request.Pool = "train"
	h.must(trainReq)

	all := h.s.Stats(StatsFilter{})
	var keys []string
	for _, s := range all {
		keys = append(keys, string(s.Type)+"/"+s.Pool)
	}
	wantKeys := []string{"CPU/*", "CPU/batch", "GPU/*", "GPU/batch", "GPU/default", "GPU/train"}
	if !reflect.DeepEqual(keys, wantKeys) {
		t.Fatalf("entries %v, want %v", keys, wantKeys)
	}
	if c := findStats(t, all, CPU, "batch").Counts; c.Total != 1 || c.Active != 1 {
		t.Fatalf("CPU/batch counts %+v, want the multi-claim allocation", c)
	}
	if c := findStats(t, all, GPU, AllPools).Counts; c.Total != 1 {
		t.Fatalf("GPU total counts %+v, want only the train request", c)
	}
	if p := findStats(t, all, GPU, "train").Policy.Policy; p != WorstFit {
		t.Fatalf("train policy %s, want the pool override WorstFit", p)
	}
	if p := findStats(t, all, GPU, AllPools).Policy.Policy; p != BestFit {
		t.Fatalf("GPU policy %s, want BestFit", p)
	}
	if d := findStats(t, all, GPU, AllPools).Devices; d.Total != 3 || d.InUse != 2 {
		t.Fatalf("GPU devices %+v, want 3 with 2 in use", d)
	}

	for _, tc := range []struct {
		name string
		f    StatsFilter
		want []string
	}{
		{"type", StatsFilter{Type: GPU}, []string{"GPU/*", "GPU/batch", "GPU/default", "GPU/train"}},
		{"pool", StatsFilter{Pool: "batch"}, []string{"CPU/batch", "GPU/batch"}},
		{"type and pool", StatsFilter{Type: CPU, Pool: "batch"}, []string{"CPU/batch"}},
		{"totals", StatsFilter{Pool: AllPools}, []string{"CPU/*", "GPU/*"}},
		{"empty type keeps its total", StatsFilter{Type: Sensor}, []string{"Sensor/*"}},
		{"unknown pool", StatsFilter{Pool: "nope"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, s := range h.s.Stats(tc.f) {
				got = append(got, string(s.Type)+"/"+s.Pool)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	if s := h.s.Stats(StatsFilter{Type: Sensor})[0]; s.Policy.Policy != FirstFit || s.Counts.Total != 0 {
		t.Fatalf("empty Sensor stats %+v, want zero counts under FirstFit", s)
	}

	// Once its devices are gone, a lost allocation counts under the pool
	// its request asked for ("" here).
	h.must(&RemoveHost{HostID: "h2"})
	cpu := h.s.Stats(StatsFilter{Type: CPU})
	if len(cpu) != 2 || cpu[1].Pool != "" || cpu[1].Counts.Lost != 1 || cpu[1].Counts.Successful != 1 {
		t.Fatalf("CPU after removal %+v, want the lost allocation under pool \"\"", cpu)
	}
}

func TestStatsUtilisation(t *testing.T) {
	h := newHarness(t)
	shared := DeviceSpec{ID: "s1", Type: GPU, Pool: "shared", Shareable: true,
		Capabilities: Capabilities{Resources: Resources{MemoryGB: 80, ComputeUnits: 100}}}
	h.must(host("h1", shared, gpu("e1", 16), gpu("e2", 16), gpu("e3", 16), gpu("e4", 16)))
	h.must(host("h2", gpu("e5", 16)))
	h.must(&SetDeviceStatus{DeviceID: "e3", Status: Draining})
	h.must(&SetDeviceStatus{DeviceID: "e4", Status: Unhealthy})
	h.must(&SetHostStatus{HostID: "h2", Up: false})
	h.must(&Allocate{Request: Request{Pool: "shared", Claims: []Claim{{Type: GPU, Count: 1, Amount: Resources{ComputeUnits: 25, MemoryGB: 40}}}}})
	h.must(gpuReq(8)) // e1 or e2, whole

	for _, tc := range []struct {
		pool    string
		util    float64
		devices DeviceCounts
	}{
		// compute units are the primary dimension: 25 of 100.
		{"shared", 0.25, DeviceCounts{Total: 1, Available: 1, InUse: 1}},
		// e1, e2 schedulable, one in use; e3 draining, e4 unhealthy, e5 offline.
		{DefaultPool, 0.5, DeviceCounts{Total: 5, Available: 2, Draining: 1, Unhealthy: 1, Offline: 1, InUse: 1}},
		{AllPools, (0.25 + 1) / 3, DeviceCounts{Total: 6, Available: 3, Draining: 1, Unhealthy: 1, Offline: 1, InUse: 2}},
	} {
		s := findStats(t, h.s.Stats(StatsFilter{Type: GPU}), GPU, tc.pool)
		if !near(s.Utilisation, tc.util) {
			t.Errorf("%s: utilisation %v, want %v", tc.pool, s.Utilisation, tc.util)
		}
		if s.Devices != tc.devices {
			t.Errorf("%s: devices %+v, want %+v", tc.pool, s.Devices, tc.devices)
		}
	}
}

// Where a fragmentation scenario puts its spare pool.
const (
	noSpare      = iota
	spareHost    // a fifth host of two free GPUs in pool "spare"
	sparePerHost // one free GPU in pool "spare" on each of the four hosts
)

// fragScenario builds four hosts of two GPUs under policy, records six
// two-GPU requests (refused by a label nobody has, so they leave only
// their shape) and places four one-GPU requests in the default pool. A
// spreading policy leaves one free default GPU per host, which no two-GPU
// request can use.
func fragScenario(t *testing.T, policy Policy, spare int) *harness {
	h := newHarness(t)
	for _, hid := range []string{"1", "2", "3", "4"} {
		devs := []DeviceSpec{gpu("g"+hid+"1", 16), gpu("g"+hid+"2", 16)}
		if spare == sparePerHost {
			devs = append(devs, gpuIn("s"+hid, "spare", 16))
		}
		h.must(host("h"+hid, devs...))
	}
	if spare == spareHost {
		h.must(host("h5", gpuIn("g51", "spare", 16), gpuIn("g52", "spare", 16)))
	}
	h.must(&SetPolicy{DeviceType: GPU, Config: PolicyConfig{Policy: policy}})
	for i := 0; i < 6; i++ {
		r := gpuReq(8)
		r.Request.Claims[0].Count = 2
		r.Request.Labels.Required = map[string]string{"nobody": "has"}
		if res := h.apply(r); !errors.Is(res.Err, ErrNoCapacity) {
			t.Fatalf("labelled request: %v, want no capacity", res.Err)
		}
	}
	for i := 0; i < 4; i++ {
		r := gpuReq(8)
		r.Request.Pool = DefaultPool
		h.must(r)
	}
	return h
}

func TestStatsFragmentation(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy Policy
		spare  int
		want   map[string]float64
	}{
		// Each host keeps 1 free GPU: the 2-GPU shape (weight 0.6) cannot
		// use it, the 1-GPU shape (0.4) can.
		{"spread", LoadBalanced, noSpare, map[string]float64{AllPools: 0.6, DefaultPool: 0.6}},
		// Packed: two hosts full, two wholly free; every shape fits.
		{"packed", BestFit, noSpare, map[string]float64{AllPools: 0, DefaultPool: 0}},
		// A spare pool of one free host: the 2-GPU shape (any pool) fits
		// there; the 1-GPU shape (pool default) cannot use it. Total:
		// (4 hosts x 0.6 x 2 + 0.4 x 4) / (4 x 2 + 4).
		{"spread with spare host", LoadBalanced, spareHost, map[string]float64{AllPools: 6.4 / 12, DefaultPool: 0.6, "spare": 0}},
		// One spare GPU beside each host's free default GPU. Pool default
		// sees one free GPU per host (the spare one is hidden): 0.6. Pool
		// spare: only the 2-GPU shape may use it and cannot: 1. Every
		// pool: the 2-GPU shape fits across both pools, the 1-GPU shape
		// (pool default) cannot use the spare GPU: 0.4 x 2 / 4 per host.
		{"spread with a spare GPU per host", LoadBalanced, sparePerHost, map[string]float64{AllPools: 0.2, DefaultPool: 0.6, "spare": 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := fragScenario(t, tc.policy, tc.spare)
			stats := h.s.Stats(StatsFilter{Type: GPU})
			for pool, want := range tc.want {
				if got := findStats(t, stats, GPU, pool).Fragmentation; !near(got, want) {
					t.Errorf("pool %s: fragmentation %v, want %v", pool, got, want)
				}
			}
		})
	}
	// A two-claim shape of shares: its first claim (10) could be served
	// m = 6 + 1 = 7 times, the whole shape (10 and 55) only k = 1 time,
	// so fragCopyWeight times (m-k)/m of the usable capacity counts as
	// fragmented: fragCopyWeight x 6/7 of the 2 free devices' worth, over 2.
	t.Run("two claims counted in copies", func(t *testing.T) {
		h := newHarness(t)
		share := func(id string, cu float64) DeviceSpec {
			return DeviceSpec{ID: id, Type: GPU, Shareable: true, Capabilities: Capabilities{Resources: Resources{ComputeUnits: cu}}}
		}
		h.must(host("h1", share("a-big", 60), share("b-small", 10)))
		r := &Allocate{Request: Request{Claims: []Claim{
			{Type: GPU, Count: 1, Amount: Resources{ComputeUnits: 10}},
			{Type: GPU, Count: 1, Amount: Resources{ComputeUnits: 55}},
		}, Labels: LabelSelector{Required: map[string]string{"nobody": "has"}}}}
		if res := h.apply(r); !errors.Is(res.Err, ErrNoCapacity) {
			t.Fatalf("labelled request: %v, want no capacity", res.Err)
		}
		if f, want := h.s.Stats(StatsFilter{Type: GPU})[0].Fragmentation, fragCopyWeight*6/7; !near(f, want) {
			t.Fatalf("fragmentation %v, want %v", f, want)
		}
	})
	// No recent requests: nothing to measure against.
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 16)))
	if f := h.s.Stats(StatsFilter{Type: GPU})[0].Fragmentation; f != 0 {
		t.Fatalf("fragmentation %v without requests, want 0", f)
	}
}

func TestPools(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpuIn("g1", "train", 16), gpu("g2", 16)))
	h.must(&RegisterHost{Host: HostSpec{ID: "h2"}, Devices: []DeviceSpec{
		{ID: "c1", Type: CPU, Pool: "train", Capabilities: Capabilities{Resources: Resources{ComputeUnits: 16}}},
	}})
	h.must(&SetHostStatus{HostID: "h2", Up: false})
	h.must(&SetPolicy{Pool: "train", Config: PolicyConfig{Policy: WorstFit}})
	h.must(&SetPolicy{Pool: "empty", Config: PolicyConfig{Policy: FirstFit}})
	r := gpuReq(8)
	r.Request.Pool = DefaultPool
	h.must(r)

	got := h.s.Pools()
	worst, first := PolicyConfig{Policy: WorstFit}, PolicyConfig{Policy: FirstFit}
	want := []PoolInfo{
		{Name: DefaultPool, Types: []DeviceType{GPU}, Devices: DeviceCounts{Total: 1, Available: 1, InUse: 1},
			Policies: map[DeviceType]PolicyConfig{GPU: {Policy: BestFit}}},
		{Name: "empty", Types: []DeviceType{}, Override: &first, Policies: map[DeviceType]PolicyConfig{}},
		{Name: "train", Types: []DeviceType{CPU, GPU}, Devices: DeviceCounts{Total: 2, Available: 1, Offline: 1},
			Override: &worst, Policies: map[DeviceType]PolicyConfig{CPU: worst, GPU: worst}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("pools\n got %+v\nwant %+v", got, want)
	}
}

// Stats and Recommend read; they change nothing a snapshot holds.
func TestStatsReadOnly(t *testing.T) {
	h := fragScenario(t, LoadBalanced, spareHost)
	h.must(&SetDeviceStatus{DeviceID: "g11", Status: Unhealthy})
	before := string(h.s.SnapshotBytes())
	first := h.s.Stats(StatsFilter{})
	recs := h.s.Recommend("")
	if after := string(h.s.SnapshotBytes()); after != before {
		t.Fatal("Stats or Recommend changed the state")
	}
	if err := h.s.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, h.s.Stats(StatsFilter{})) || !reflect.DeepEqual(recs, h.s.Recommend("")) {
		t.Fatal("a second call answers differently")
	}
	restored, err := Restore(bytesReader(h.s.SnapshotBytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, restored.Stats(StatsFilter{})) || !reflect.DeepEqual(recs, restored.Recommend("")) {
		t.Fatal("a restored state answers differently")
	}
}

// benchStatsState is n GPU hosts of 8 mixed GPUs under LoadBalanced, a
// history of 10,000 ended one-GPU allocations, then n two- or three-GPU
// requests and 2n one-GPU requests that stay.
func benchStatsState(b *testing.B, hosts int) *harness {
	h := newHarness(b)
	sizes := []float64{16, 24, 40, 80}
	for i := 0; i < hosts; i++ {
		var devs []DeviceSpec
		for j := 0; j < 8; j++ {
			devs = append(devs, gpu(fmt.Sprintf("g%05d-%d", i, j), sizes[(i+j)%len(sizes)]))
		}
		if r := h.apply(host(fmt.Sprintf("h%05d", i), devs...)); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	h.apply(&SetPolicy{DeviceType: GPU, Config: PolicyConfig{Policy: LoadBalanced}})
	for i := 0; i < 10000; i++ {
		if res := h.apply(gpuReq(sizes[i%len(sizes)])); res.Err == nil {
			h.apply(&Release{AllocationID: res.Allocation.ID})
		}
	}
	// Claims of several devices ask for sizes every host has three of,
	// so none is refused: a refusal explains itself over every device,
	// which would make building a large state quadratic.
	for i := 0; i < hosts; i++ {
		r := gpuReq(sizes[i%(len(sizes)-1)])
		r.Request.Claims[0].Count = 2 + i%2
		h.apply(r)
	}
	for i := 0; i < hosts*2; i++ {
		h.apply(gpuReq(16))
	}
	if err := h.s.CheckInvariants(); err != nil {
		b.Fatal(err)
	}
	return h
}

func BenchmarkStats(b *testing.B) {
	for _, hosts := range []int{125, 1250} {
		h := benchStatsState(b, hosts)
		b.Run(fmt.Sprintf("devices=%d", hosts*8), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				h.s.Stats(StatsFilter{})
			}
		})
		b.Run(fmt.Sprintf("recommend/devices=%d", hosts*8), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				h.s.Recommend("")
			}
		})
	}
}

// Reads run side by side under a shared lock: Stats, Recommend and Pools
// must not write to the state, not even to its derived caches. A new
// class of exclusive devices leaves nothing to recompute lazily.
func TestStatsConcurrentReads(t *testing.T) {
	for _, restored := range []bool{false, true} {
		h := fragScenario(t, LoadBalanced, sparePerHost)
		h.must(host("h9", gpu("g91", 141)))
		s := h.s
		if restored {
			var err error
			if s, err = Restore(bytesReader(h.s.SnapshotBytes())); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan struct{})
		for i := 0; i < 4; i++ {
			go func() {
				defer func() { done <- struct{}{} }()
				s.Stats(StatsFilter{})
				s.Recommend("")
				s.Pools()
			}()
		}
		for i := 0; i < 4; i++ {
			<-done
		}
	}
}

// A type whose requests are a small share of the traffic still has its
// typical requests: shapes are chosen among the type's own requests.
func TestStatsFragmentationMinorType(t *testing.T) {
	h := fragScenario(t, LoadBalanced, noSpare)
	h.must(host("c", DeviceSpec{ID: "c1", Type: CPU, Capabilities: Capabilities{Resources: Resources{ComputeUnits: 64}}}))
	for i := 0; i < 500; i++ {
		r := h.apply(&Allocate{Request: Request{Claims: []Claim{{Type: CPU, Count: 1}}}})
		if r.Err == nil {
			h.must(&Release{AllocationID: r.Allocation.ID})
		}
	}
	if f := findStats(t, h.s.Stats(StatsFilter{Type: GPU}), GPU, AllPools).Fragmentation; !near(f, 0.6) {
		t.Fatalf("GPU fragmentation %v among 500 CPU requests, want 0.6", f)
	}
}

// A statistics tree short of a value it should hold is a fault of the
// state, not a crash: the apply that finds it records it, and
// CheckInvariants reports it from then on.
func TestStatsFaultIsRecordedNotPanicked(t *testing.T) {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 80)))
	r := h.must(gpuReq(12))
	a, ok := h.s.Allocation(r.Allocation.ID)
	if !ok {
		t.Fatal("allocation not found")
	}
	if err := h.s.Fault(); err != nil {
		t.Fatalf("fault before the damage: %v", err)
	}
	h.s.aggCount(a, -1) // the trees lose the allocation behind the state's back
	if err := h.s.Fault(); err != nil {
		t.Fatalf("fault after a removal of values held: %v", err)
	}
	res := h.apply(&Release{AllocationID: a.ID}) // its removal finds nothing
	if res.Err != nil {
		t.Fatalf("release: %v", res.Err)
	}
	err := h.s.Fault()
	if !errors.Is(err, ErrInconsistent) {
		t.Fatalf("fault after the release: %v", err)
	}
	if got := h.s.CheckInvariants(); !errors.Is(got, ErrInconsistent) {
		t.Fatalf("CheckInvariants: %v", got)
	}
}
