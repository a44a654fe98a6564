package fsm

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
)

// The benchmarks run on a cluster of GPU hosts with 8 devices each, of mixed
// models, spread over zones, half of whose devices are held by background
// allocations released at seeded random positions (and every 16th host
// left wholly free, so that a request for a whole host always fits). One
// operation is one Allocate and one Release applied through State.Apply,
// so the figure per operation is the cost of an allocate+release pair.
//
//	go test -run '^$' -bench AllocRelease -benchtime 2s -count 5 ./fsm/

// benchModel is a GPU model and its share of the hosts.
type benchModel struct {
	name      string
	memGB     float64
	cu        float64
	shareable bool
	weight    int
}

// benchModels is the inventory mix: exclusive GPUs of five models and a few
// hosts of shareable (sliced) GPUs.
var benchModels = []benchModel{
	{name: "T4", memGB: 16, cu: 40, weight: 25},
	{name: "V100", memGB: 32, cu: 80, weight: 20},
	{name: "A100-40", memGB: 40, cu: 108, weight: 20},
	{name: "A100-80", memGB: 80, cu: 108, weight: 15},
	{name: "H100", memGB: 80, cu: 132, weight: 15},
	{name: "A100-80-shared", memGB: 80, cu: 108, shareable: true, weight: 5},
}

// benchThresholds is the fixed cycle of memory thresholds (GB) requests ask for.
var benchThresholds = []float64{8, 16, 12, 32, 24, 40, 16, 80, 8, 48, 16, 64}

const benchDevicesPerHost = 8

// benchSizes are the cluster sizes, in devices.
var benchSizes = []int{1000, 10000, 100000}

// benchPolicies are the policies the allocate+release target applies to.
var benchPolicies = []Policy{FirstFit, BestFit, WorstFit, RoundRobin, PriorityBased, LoadBalanced}

// benchCluster is a state and the log position the benchmark writes at.
type benchCluster struct {
	key string
	s   *State
	idx uint64
	now int64
}

// apply stamps a command with the next index, a time 1 ms later and a
// fresh request ID, as the leader and a client would.
func (c *benchCluster) apply(cmd Command) Result {
	c.idx++
	c.now += int64(time.Millisecond)
	m := cmd.meta()
	m.Time = c.now
	m.RequestID = "req-" + strconv.FormatUint(c.idx, 10)
	return c.s.Apply(c.idx, cmd)
}

func (c *benchCluster) must(b *testing.B, cmd Command) Result {
	b.Helper()
	r := c.apply(cmd)
	if r.Err != nil {
		b.Fatalf("%T: %v", cmd, r.Err)
	}
	return r
}

// benchHost is host i of the inventory, its model drawn from the mix.
func benchHost(i int, rng *rand.Rand) *RegisterHost {
	total := 0
	for _, m := range benchModels {
		total += m.weight
	}
	pick := rng.IntN(total)
	m := benchModels[0]
	for _, x := range benchModels {
		if pick < x.weight {
			m = x
			break
		}
		pick -= x.weight
	}
	id := fmt.Sprintf("host-%06d", i)
	h := &RegisterHost{Host: HostSpec{ID: id, Labels: map[string]string{"zone": fmt.Sprintf("zone-%d", i%4)}}}
	for j := 0; j < benchDevicesPerHost; j++ {
		h.Devices = append(h.Devices, DeviceSpec{
			ID: fmt.Sprintf("%s-gpu%d", id, j), Type: GPU, Name: m.name, Shareable: m.shareable,
			Capabilities: Capabilities{Resources: Resources{MemoryGB: m.memGB, ComputeUnits: m.cu}},
		})
	}
	return h
}

// newBenchCluster registers devices GPUs, takes every one, then releases
// a seeded random half and every device of every 16th host, and sets the
// policy under test for GPUs.
func newBenchCluster(b *testing.B, devices int, pol Policy) *benchCluster {
	b.Helper()
	c := &benchCluster{s: New(), now: t0}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < devices/benchDevicesPerHost; i++ {
		c.must(b, benchHost(i, rng))
	}
	c.must(b, &SetPolicy{DeviceType: GPU, Config: PolicyConfig{Policy: FirstFit}})
	ids := make([]string, 0, devices)
	for i := 0; i < devices; i++ {
		r := c.must(b, &Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 1}}}})
		ids = append(ids, r.Allocation.ID)
	}
	// Allocation i took device i%8 of host i/8 (FirstFit, in ID order).
	for i, id := range ids {
		if (i/benchDevicesPerHost)%16 == 0 {
			c.must(b, &Release{AllocationID: id})
			ids[i] = ""
		}
	}
	rng.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	n := 0
	for _, id := range ids {
		if id == "" {
			continue
		}
		if n >= devices/2-devices/(16*2) {
			break
		}
		c.must(b, &Release{AllocationID: id})
		n++
	}
	c.must(b, &SetPolicy{DeviceType: GPU, Config: PolicyConfig{Policy: pol}})
	return c
}

// benchCached keeps the last cluster built, so the runs of one benchmark
// (its -count repetitions) share one setup. Each operation puts back what
// it took, so the occupancy stays as built.
var benchCached *benchCluster

func benchClusterFor(b *testing.B, devices int, pol Policy) *benchCluster {
	key := fmt.Sprintf("%s/%d", pol, devices)
	if benchCached == nil || benchCached.key != key {
		benchCached = nil
		benchCached = newBenchCluster(b, devices, pol)
		benchCached.key = key
	}
	return benchCached
}

func gpuClaim(memGB float64, count int) Claim {
	return Claim{Type: GPU, Count: count, Capabilities: Capabilities{Resources: Resources{MemoryGB: memGB}}}
}

// runPairs applies allocate+release pairs, the request of pair i made by
// req(i), and reports pairs per second. One untimed round of the request
// cycle first brings the derived indexes to their steady state.
func runPairs(b *testing.B, c *benchCluster, req func(i int) Request) {
	runPairsIn(b, c, req, func(int) string { return DefaultNamespace })
}

// runPairsIn is runPairs with pair i in namespace ns(i).
func runPairsIn(b *testing.B, c *benchCluster, req func(i int) Request, ns func(i int) string) {
	b.ReportAllocs()
	alloc := func(i int) *Allocate {
		a := &Allocate{Request: req(i)}
		a.Namespace = ns(i)
		return a
	}
	for i := range benchThresholds {
		if r := c.apply(alloc(i)); r.Err == nil {
			rel := &Release{AllocationID: r.Allocation.ID}
			rel.Namespace = ns(i)
			c.must(b, rel)
		}
	}
	i := 0
	for b.Loop() {
		r := c.apply(alloc(i))
		if r.Err != nil {
			b.Fatalf("allocate %d: %v", i, r.Err)
		}
		rel := &Release{AllocationID: r.Allocation.ID}
		rel.Namespace = ns(i)
		if r := c.apply(rel); r.Err != nil {
			b.Fatalf("release %d: %v", i, r.Err)
		}
		i++
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
}

// BenchmarkAllocRelease is the throughput target: one single-GPU request
// with a memory threshold, then its release, per operation.
func BenchmarkAllocRelease(b *testing.B) {
	for _, pol := range benchPolicies {
		for _, n := range benchSizes {
			b.Run(fmt.Sprintf("policy=%s/devices=%d", pol, n), func(b *testing.B) {
				c := benchClusterFor(b, n, pol)
				runPairs(b, c, func(i int) Request {
					return Request{Claims: []Claim{gpuClaim(benchThresholds[i%len(benchThresholds)], 1)}}
				})
			})
		}
	}
}

// benchShapes are the request shapes: one GPU, a claim of 4 GPUs, two
// claims of 2 GPUs each, a whole 8-GPU host, and a gang of 32 GPUs over
// at most 8 hosts, each with a memory threshold from a fixed cycle.
var benchShapes = []struct {
	name string
	req  func(i int) Request
}{
	{"single", func(i int) Request {
		return Request{Claims: []Claim{gpuClaim(benchThresholds[i%len(benchThresholds)], 1)}}
	}},
	{"count4", func(i int) Request {
		return Request{Claims: []Claim{gpuClaim(benchThresholds[i%len(benchThresholds)]/2, 4)}}
	}},
	{"2claims", func(i int) Request {
		t := benchThresholds[i%len(benchThresholds)]
		return Request{Claims: []Claim{gpuClaim(t, 2), gpuClaim(t/2, 2)}}
	}},
	{"count8", func(i int) Request {
		return Request{Claims: []Claim{gpuClaim(benchThresholds[i%len(benchThresholds)]/2, benchDevicesPerHost)}}
	}},
	{"gang32", func(i int) Request {
		return Request{Claims: []Claim{gpuClaim(benchThresholds[i%len(benchThresholds)]/2, 32)}, MaxHosts: 8}
	}},
}

// BenchmarkMultiDevice places requests that need several devices on one
// host, under each classic policy.
func BenchmarkMultiDevice(b *testing.B) {
	for _, pol := range benchPolicies {
		for _, n := range benchSizes {
			for _, sh := range benchShapes[1:] {
				b.Run(fmt.Sprintf("policy=%s/devices=%d/shape=%s", pol, n, sh.name), func(b *testing.B) {
					runPairs(b, benchClusterFor(b, n, pol), sh.req)
				})
			}
		}
	}
}

// BenchmarkFragmentationAware is every request shape under
// FragmentationAware, which weighs every host that can take a request.
func BenchmarkFragmentationAware(b *testing.B) {
	for _, n := range benchSizes {
		for _, sh := range benchShapes {
			b.Run(fmt.Sprintf("devices=%d/shape=%s", n, sh.name), func(b *testing.B) {
				runPairs(b, benchClusterFor(b, n, FragmentationAware), sh.req)
			})
		}
	}
}

// BenchmarkEncodeDecode round-trips an Allocate through the log codec.
func BenchmarkEncodeDecode(b *testing.B) {
	cmd := &Allocate{
		Meta: Meta{RequestID: "req-123456", Time: t0},
		Request: Request{
			Claims:   []Claim{gpuClaim(40, 2), {Type: CPU, Count: 1, Amount: Resources{ComputeUnits: 8, MemoryGB: 32}}},
			Priority: 500, Timeout: time.Minute, LeaseTTL: time.Hour,
			Labels: LabelSelector{Required: map[string]string{"zone": "zone-1"}, Forbidden: map[string]string{"maintenance": "*"}},
		},
	}
	b.ReportAllocs()
	for b.Loop() {
		buf, err := Encode(cmd)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Decode(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSnapshot writes and restores the state of a freshly built
// 10k-device cluster with its background allocations and history.
func BenchmarkSnapshot(b *testing.B) {
	c := newBenchCluster(b, 10000, BestFit)
	snap := c.s.SnapshotBytes()
	b.Run("write", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(snap)))
		for b.Loop() {
			if c.s.SnapshotBytes() == nil {
				b.Fatal("snapshot failed")
			}
		}
	})
	b.Run("restore", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(snap)))
		for b.Loop() {
			if _, err := Restore(bytesReader(snap)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestAllocIDForMatchesNewSHA1 pins the allocation IDs derived from log
// indexes to uuid.NewSHA1, which they must equal on every replica and
// across versions.
func TestAllocIDForMatchesNewSHA1(t *testing.T) {
	for _, idx := range []uint64{0, 1, 9, 10, 12345, 1 << 32, ^uint64(0)} {
		want := uuid.NewSHA1(allocNamespace, []byte(strconv.FormatUint(idx, 10))).String()
		if got := allocIDFor(idx); got != want {
			t.Errorf("allocIDFor(%d) = %s, want %s", idx, got, want)
		}
	}
}

// benchHistoryState is benchStatsState's cluster with its history grown
// to history entries by a test-only builder: copies of one-GPU
// allocations that ended, with durations and waits drawn from a seeded
// generator, filed straight into the history, then the aggregates
// rebuilt as Restore rebuilds them. Applying a million commands would
// cost the benchmark's setup minutes.
func benchHistoryState(b *testing.B, hosts, history int) *harness {
	h := benchStatsState(b, hosts)
	s := h.s
	s.retention = Retention{MaxCount: MaxRetentionCount, MaxAge: 365 * 24 * time.Hour}
	rng := rand.New(rand.NewPCG(3, 4))
	devs := sortedKeys(s.devices)
	statuses := []AllocStatus{Released, Released, Released, Expired, Lost, Preempted, TimedOut, Failed}
	for s.history.len() < history {
		s.seq++
		st := statuses[rng.IntN(len(statuses))]
		a := &Allocation{
			ID: fmt.Sprintf("hist-%07d", s.seq), Namespace: DefaultNamespace, Status: st, Seq: s.seq,
			Request:     Request{Claims: []Claim{{Type: GPU, Count: 1}}, Priority: rng.IntN(3)},
			RequestedAt: s.now - int64(rng.IntN(int(48*time.Hour))),
		}
		a.EndedAt = a.RequestedAt + int64(rng.IntN(int(time.Minute)))
		if st != TimedOut && st != Failed {
			a.AllocatedAt = a.EndedAt
			a.EndedAt += int64(rng.IntN(int(6 * time.Hour)))
			a.Devices = []Assignment{{DeviceID: devs[rng.IntN(len(devs))]}}
		}
		s.history.add(a)
	}
	s.rebuildStatsAgg()
	return h
}

// rebuildStatsAgg recomputes the aggregates of a state whose history was
// filed straight into it, the way Restore computes them as the history
// arrives.
func (s *State) rebuildStatsAgg() {
	s.agg = newStatsAgg()
	for _, d := range s.devices { // counting only
		s.agg.countDevice(d, 1)
	}
	g := newStatsGather()
	for _, id := range sortedKeys(s.allocs) {
		s.gatherLive(g, s.allocs[id])
	}
	s.history.each(func(a *Allocation) bool {
		g.add(a, s.statsPool(a))
		return true
	})
	s.agg.settle([]*statsGather{g}, s.devices)
}

// statsScaleStates keeps the states BenchmarkStatsScale built, so that
// -count runs build each once.
var statsScaleStates = map[int]*harness{}

// BenchmarkStatsScale reads the statistics and recommendations of large
// states. "stats" and "recommend" read a state that did not change since
// the last read; "stats-churn" places and releases one GPU before each
// read, so the read brings the figures of one host up to date;
// "rebuild" is rebuildStatsAgg, what Restore pays for the aggregates
// (the device side is then computed by the first read, "first-read").
// "stats-scratch" and "recommend-scratch" are the from-scratch
// references, what Stats and Recommend cost before the aggregates; they
// run on the smaller state only (one call takes seconds on the larger).
//
//	go test -run '^$' -bench 'StatsScale' -benchtime 3x -count 5 ./fsm/
func BenchmarkStatsScale(b *testing.B) {
	for _, size := range []struct{ hosts, history int }{{1250, 100000}, {12500, 1000000}} {
		h := statsScaleStates[size.hosts]
		if h == nil {
			h = benchHistoryState(b, size.hosts, size.history)
			statsScaleStates[size.hosts] = h
		}
		name := fmt.Sprintf("devices=%d/history=%d", size.hosts*8, size.history)
		small := size.hosts <= 1250
		b.Run("rebuild/"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				h.s.rebuildStatsAgg()
			}
		})
		b.Run("first-read/"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				h.s.rebuildStatsAgg()
				b.StartTimer()
				h.s.Stats(StatsFilter{})
				h.s.Recommend("")
			}
		})
		b.Run("stats/"+name, func(b *testing.B) {
			h.s.Stats(StatsFilter{})
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				h.s.Stats(StatsFilter{})
			}
		})
		b.Run("stats-churn/"+name, func(b *testing.B) {
			h.s.Stats(StatsFilter{})
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if r := h.apply(gpuReq(16)); r.Err == nil {
					h.apply(&Release{AllocationID: r.Allocation.ID})
				}
				h.s.Stats(StatsFilter{})
			}
		})
		b.Run("recommend/"+name, func(b *testing.B) {
			h.s.Recommend("")
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				h.s.Recommend("")
			}
		})
		if !small {
			continue
		}
		b.Run("stats-scratch/"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				h.s.statsFromScratch(StatsFilter{})
			}
		})
		b.Run("recommend-scratch/"+name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				h.s.recommendFromScratch("")
			}
		})
	}
}

// BenchmarkNamespaces is placement with many teams: the single and
// count4 shapes under BestFit at 100k devices, the requests spread over
// 100 namespaces, each with a quota (a GPU count and a memory amount,
// above what the benchmark takes: every limit is checked, none refuses),
// beside the same requests in one namespace without quotas; "fair" adds
// fair share on and borrowing on every quota.
func BenchmarkNamespaces(b *testing.B) {
	const namespaces = 100
	for _, mode := range []string{"none", "quotas", "fair"} {
		for _, sh := range benchShapes[:2] {
			b.Run(fmt.Sprintf("teams=%s/shape=%s", mode, sh.name), func(b *testing.B) {
				c := newBenchCluster(b, 100000, BestFit)
				names := make([]string, namespaces)
				for i := range names {
					names[i] = fmt.Sprintf("team-%03d", i)
					if mode == "none" {
						names[i] = DefaultNamespace
						continue
					}
					n := 100000
					c.must(b, &SetQuota{Quota: Quota{Namespace: names[i], Weight: float64(1 + i%5), Borrow: mode == "fair",
						Limits: []QuotaLimit{{DeviceType: GPU, MaxCount: &n, MaxAmount: Resources{MemoryGB: 1e7}}, {DeviceType: CPU, MaxAmount: Resources{ComputeUnits: 1e6}}}}})
				}
				if mode == "fair" {
					c.must(b, &SetQueueConfig{FairShare: true, HalfLife: time.Hour})
				}
				runPairsIn(b, c, sh.req, func(i int) string { return names[i%namespaces] })
			})
		}
	}
}

// BenchmarkReplicaBatch is what one replica spends per write on the
// batched write path that `dmsc bench -batch -mix alloc=100` drives: log
// entries of 128 writes, half of them allocations of one GPU and half the
// releases of the allocations of the entry before, each with its own
// request ID and allocation ID (as the API gives them), on 64 hosts of 8
// GPUs, decoded from the entry's bytes and applied.
func BenchmarkReplicaBatch(b *testing.B) {
	const perEntry, hosts = 128, 64
	s := New()
	rng := rand.New(rand.NewPCG(1, 2))
	idx, now := uint64(0), t0
	stamp := func(c Command) {
		idx++
		now += int64(time.Millisecond)
		c.meta().Time = now
	}
	for i := range hosts {
		h := benchHost(i, rng)
		stamp(h)
		if r := s.Apply(idx, h); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	entries := make([][]byte, b.N)
	var prev []string
	for n := range entries {
		batch := &Batch{}
		var next []string
		for i := range perEntry / 2 {
			a := &Allocate{AllocationID: uuid.NewString(), Request: Request{Claims: []Claim{gpuClaim(benchThresholds[i%len(benchThresholds)], 1)}}}
			a.RequestID = uuid.NewString()
			batch.Commands = append(batch.Commands, a)
			next = append(next, a.AllocationID)
			if i < len(prev) {
				r := &Release{AllocationID: prev[i]}
				r.RequestID = uuid.NewString()
				batch.Commands = append(batch.Commands, r)
			}
		}
		prev = next
		batch.Time = now + int64(n+1)*int64(time.Millisecond)
		for _, c := range batch.Commands {
			Stamp(c, time.Unix(0, batch.Time)) // as the leader does: time and digest
		}
		data, err := Encode(batch)
		if err != nil {
			b.Fatal(err)
		}
		entries[n] = data
	}
	b.ReportAllocs()
	b.ResetTimer()
	writes := 0
	for n, data := range entries {
		c, err := Decode(data)
		if err != nil {
			b.Fatal(err)
		}
		res := s.Apply(idx+uint64(n)+1, c)
		if res.Err != nil {
			b.Fatalf("entry %d: %v", n, res.Err)
		}
		for i, r := range res.Batch {
			if r.Err != nil {
				b.Fatalf("entry %d, command %d: %v", n, i, r.Err)
			}
		}
		writes += len(res.Batch)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(writes), "ns/write")
}
