package fsm

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"
)

// recWant is a recommendation a case expects: kind and pool must match,
// priority, policy and devices when set.
type recWant struct {
	kind    RecommendationKind
	pool    string
	prio    RecommendationPriority
	policy  Policy
	devices []string
}

func findRec(recs []Recommendation, kind RecommendationKind, pool string) *Recommendation {
	for i := range recs {
		if recs[i].Kind == kind && recs[i].Pool == pool {
			return &recs[i]
		}
	}
	return nil
}

// recTimeouts fills one GPU and lets ten requests of the given priorities
// time out behind it.
func recTimeouts(t *testing.T, policy Policy, prio func(i int) int) *harness {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 16)))
	h.must(&SetPolicy{DeviceType: GPU, Config: PolicyConfig{Policy: policy}})
	hold := gpuReq(8)
	hold.Request.Priority = MaxPriority
	h.must(hold)
	for i := 0; i < 10; i++ {
		r := withTimeout(gpuReq(8), time.Second)
		r.Request.Priority = prio(i)
		h.must(r)
	}
	h.advance(2 * time.Second)
	return h
}

// recQuick places and releases n one-GPU requests, each held for hold,
// on a host of n GPUs.
func recQuick(t *testing.T, n int, hold time.Duration) *harness {
	h := newHarness(t)
	var devs []DeviceSpec
	for i := 0; i < n; i++ {
		devs = append(devs, gpu(fmt.Sprintf("g%02d", i), 16))
	}
	h.must(host("h1", devs...))
	for i := 0; i < n; i++ {
		start := float64(i+1) * 3600
		id := statsMust(h, start, gpuReq(8)).Allocation.ID
		statsMust(h, start+hold.Seconds(), &Release{AllocationID: id})
	}
	return h
}

// recLong places n one-GPU requests with a lease TTL (0: none) and lets
// them run for d.
func recLong(t *testing.T, n int, ttl, d time.Duration) *harness {
	h := newHarness(t)
	var devs []DeviceSpec
	for i := 0; i < n; i++ {
		devs = append(devs, gpu(fmt.Sprintf("g%02d", i), 16))
	}
	h.must(host("h1", devs...))
	for i := 0; i < n; i++ {
		r := gpuReq(8)
		r.Request.LeaseTTL = ttl
		h.must(r)
	}
	h.advance(d)
	return h
}

// recWaitsLong queues every other request for 10 s behind a holder:
// waits are long but do not grow.
func recWaitsLong(t *testing.T) *harness {
	h := newHarness(t)
	statsMust(h, 0, host("h1", gpu("g1", 16)))
	for i := 0; i < 6; i++ {
		start := float64(100 * i)
		hold := statsMust(h, start, gpuReq(8)).Allocation.ID
		q := statsMust(h, start+1, withTimeout(gpuReq(8), time.Hour)).Allocation.ID
		statsMust(h, start+11, &Release{AllocationID: hold})
		statsMust(h, start+12, &Release{AllocationID: q})
	}
	return h
}

// recWaits runs six requests placed at once, then a holder and five
// requests that queue behind each other for about 10 s more each (grow)
// or six more placed at once (steady).
func recWaits(t *testing.T, grow bool) *harness {
	h := newHarness(t)
	statsMust(h, 0, host("h1", gpu("g1", 16)))
	for i := 0; i < 6; i++ {
		id := statsMust(h, float64(10*i), gpuReq(8)).Allocation.ID
		statsMust(h, float64(10*i+1), &Release{AllocationID: id})
	}
	if !grow {
		for i := 6; i < 12; i++ {
			id := statsMust(h, float64(10*i), gpuReq(8)).Allocation.ID
			statsMust(h, float64(10*i+1), &Release{AllocationID: id})
		}
		return h
	}
	prev := statsMust(h, 100, gpuReq(8)).Allocation.ID
	var queued []string
	for i := 0; i < 5; i++ {
		queued = append(queued, statsMust(h, float64(101+i), withTimeout(gpuReq(8), time.Hour)).Allocation.ID)
	}
	for i, q := range queued {
		statsMust(h, float64(111+10*i), &Release{AllocationID: prev})
		prev = q
	}
	return h
}

// recHot puts two allocations on one of two hosts under FirstFit, then
// sets the policy (of the GPU type, or of pool when set).
func recHot(t *testing.T, then Policy, pool string) *harness {
	h := newHarness(t)
	p := pool
	if p == "" {
		p = DefaultPool
	}
	h.must(host("h1", gpuIn("a1", p, 16), gpuIn("a2", p, 16)))
	h.must(host("h2", gpuIn("b1", p, 16), gpuIn("b2", p, 16)))
	if pool != "" {
		h.must(host("h3", gpu("c1", 16)))
	}
	h.must(&SetPolicy{DeviceType: GPU, Config: PolicyConfig{Policy: FirstFit}})
	for i := 0; i < 2; i++ {
		r := gpuReq(8)
		r.Request.Pool = pool
		h.must(r)
	}
	// The type takes the policy too; with a pool, the type's own scope
	// (h3 alone) must not see the pool's hosts.
	h.must(&SetPolicy{DeviceType: GPU, Config: PolicyConfig{Policy: then}})
	if pool != "" {
		h.must(&SetPolicy{Pool: pool, Config: PolicyConfig{Policy: then}})
	}
	return h
}

// recLosing loses n allocations on device g1 to its host going down.
func recLosing(t *testing.T, n int) *harness {
	h := newHarness(t)
	h.must(host("h1", gpu("g1", 16)))
	h.must(host("h2", gpu("g2", 16)))
	for i := 0; i < n; i++ {
		a := h.must(gpuReq(8)).Allocation
		if a.Devices[0].DeviceID != "g1" {
			t.Fatalf("allocation on %s, want g1", a.Devices[0].DeviceID)
		}
		h.must(&SetHostStatus{HostID: "h1", Up: false})
		h.must(&SetHostStatus{HostID: "h1", Up: true})
	}
	return h
}

func TestRecommendKinds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		build  func(t *testing.T) *harness
		want   []recWant
		absent []RecommendationKind
		check  func(t *testing.T, recs []Recommendation)
	}{
		{
			name:   "fragmentation under LoadBalanced",
			build:  func(t *testing.T) *harness { return fragScenario(t, LoadBalanced, noSpare) },
			want:   []recWant{{kind: KindSwitchPolicy, prio: PriorityHigh, policy: FragmentationAware}},
			absent: []RecommendationKind{KindKeepPolicy, KindRebalance},
			check: func(t *testing.T, recs []Recommendation) {
				r := findRec(recs, KindSwitchPolicy, "")
				if !near(r.Evidence["fragmentation"], 0.6) || r.Evidence["recent_requests"] != 10 || !near(r.Confidence, 10.0/30) {
					t.Errorf("evidence %v confidence %v, want fragmentation 0.6 over 10 requests, confidence 1/3", r.Evidence, r.Confidence)
				}
			},
		},
		{
			name:   "packed under BestFit",
			build:  func(t *testing.T) *harness { return fragScenario(t, BestFit, noSpare) },
			absent: []RecommendationKind{KindSwitchPolicy},
		},
		{
			name:   "timeouts with mixed priorities",
			build:  func(t *testing.T) *harness { return recTimeouts(t, BestFit, func(i int) int { return 10 * i }) },
			want:   []recWant{{kind: KindSwitchPolicy, prio: PriorityHigh, policy: PriorityBased}, {kind: KindAddCapacity, prio: PriorityHigh}},
			absent: []RecommendationKind{KindKeepPolicy},
			check: func(t *testing.T, recs []Recommendation) {
				r := findRec(recs, KindSwitchPolicy, "")
				if r.Evidence["timed_out"] != 10 || r.Evidence["decided"] != 11 || !near(r.Evidence["timeout_rate"], 10.0/11) {
					t.Errorf("evidence %v, want 10 of 11 timed out", r.Evidence)
				}
			},
		},
		{
			name:   "timeouts with one priority",
			build:  func(t *testing.T) *harness { return recTimeouts(t, BestFit, func(int) int { return MaxPriority }) },
			want:   []recWant{{kind: KindAddCapacity, prio: PriorityHigh}},
			absent: []RecommendationKind{KindSwitchPolicy, KindKeepPolicy},
		},
		{
			name:   "timeouts under PriorityBased",
			build:  func(t *testing.T) *harness { return recTimeouts(t, PriorityBased, func(i int) int { return 10 * i }) },
			want:   []recWant{{kind: KindAddCapacity, prio: PriorityHigh}},
			absent: []RecommendationKind{KindSwitchPolicy},
		},
		{
			name:   "queue waits growing",
			build:  func(t *testing.T) *harness { return recWaits(t, true) },
			want:   []recWant{{kind: KindAddCapacity, prio: PriorityMedium}},
			absent: []RecommendationKind{KindKeepPolicy, KindSwitchPolicy},
			check: func(t *testing.T, recs []Recommendation) {
				r := findRec(recs, KindAddCapacity, "")
				// Waits 0 x 7, then 10, 19, 28, 37, 46: halves of six.
				if r.Evidence["wait_older_mean_s"] != 0 || !near(r.Evidence["wait_recent_mean_s"], 140.0/6) || r.Evidence["wait_samples"] != 12 {
					t.Errorf("evidence %v, want older mean 0, recent 140/6 over 12 waits", r.Evidence)
				}
			},
		},
		{
			name:   "queue waits steady",
			build:  func(t *testing.T) *harness { return recWaits(t, false) },
			want:   []recWant{{kind: KindKeepPolicy, prio: PriorityLow}},
			absent: []RecommendationKind{KindAddCapacity, KindSwitchPolicy, KindRebalance},
		},
		{
			name:   "queue waits long but steady",
			build:  recWaitsLong,
			want:   []recWant{{kind: KindKeepPolicy, prio: PriorityLow}},
			absent: []RecommendationKind{KindAddCapacity},
		},
		{
			name:   "hot host under LoadBalanced",
			build:  func(t *testing.T) *harness { return recHot(t, LoadBalanced, "") },
			want:   []recWant{{kind: KindRebalance, prio: PriorityMedium}},
			absent: []RecommendationKind{KindKeepPolicy},
			check: func(t *testing.T, recs []Recommendation) {
				r := findRec(recs, KindRebalance, "")
				if r.Evidence["host_util_max"] != 1 || r.Evidence["host_util_min"] != 0 || r.Evidence["hosts"] != 2 {
					t.Errorf("evidence %v, want hosts at 1 and 0", r.Evidence)
				}
			},
		},
		{
			name:   "hot host under FirstFit",
			build:  func(t *testing.T) *harness { return recHot(t, FirstFit, "") },
			want:   []recWant{{kind: KindKeepPolicy}},
			absent: []RecommendationKind{KindRebalance},
		},
		{
			name: "balanced under LoadBalanced",
			build: func(t *testing.T) *harness {
				h := newHarness(t)
				h.must(host("h1", gpu("a1", 16), gpu("a2", 16)))
				h.must(host("h2", gpu("b1", 16), gpu("b2", 16)))
				h.must(&SetPolicy{DeviceType: GPU, Config: PolicyConfig{Policy: LoadBalanced}})
				h.must(gpuReq(8))
				h.must(gpuReq(8))
				return h
			},
			absent: []RecommendationKind{KindRebalance},
		},
		{
			name:  "hot host in a pool with its own policy",
			build: func(t *testing.T) *harness { return recHot(t, LoadBalanced, "p") },
			want:  []recWant{{kind: KindRebalance, pool: "p"}, {kind: KindKeepPolicy, pool: ""}},
			check: func(t *testing.T, recs []Recommendation) {
				if r := findRec(recs, KindRebalance, ""); r != nil {
					t.Errorf("rebalance for the type scope: %+v", r)
				}
				if r := findRec(recs, KindKeepPolicy, ""); r.Message == "" || r.Evidence["decided"] != 0 {
					t.Errorf("type scope keep %+v, want no decided requests (they are in pool p)", r)
				}
			},
		},
		{
			name: "unhealthy device",
			build: func(t *testing.T) *harness {
				h := newHarness(t)
				h.must(host("h1", gpu("g1", 16), gpu("g2", 16)))
				h.must(&SetDeviceStatus{DeviceID: "g2", Status: Unhealthy})
				return h
			},
			want: []recWant{{kind: KindDrainUnhealthy, pool: DefaultPool, prio: PriorityHigh, devices: []string{"g2"}}, {kind: KindKeepPolicy}},
			check: func(t *testing.T, recs []Recommendation) {
				if r := findRec(recs, KindDrainUnhealthy, DefaultPool); r.Confidence != 1 || r.Evidence["unhealthy_devices"] != 1 {
					t.Errorf("drain %+v, want confidence 1 and one unhealthy device", r)
				}
			},
		},
		{
			name: "draining device",
			build: func(t *testing.T) *harness {
				h := newHarness(t)
				h.must(host("h1", gpu("g1", 16), gpu("g2", 16)))
				h.must(&SetDeviceStatus{DeviceID: "g2", Status: Draining})
				return h
			},
			absent: []RecommendationKind{KindDrainUnhealthy},
		},
		{
			name:  "device losing allocations",
			build: func(t *testing.T) *harness { return recLosing(t, RecommendLostPerDevice) },
			want:  []recWant{{kind: KindDrainUnhealthy, pool: DefaultPool, prio: PriorityMedium, devices: []string{"g1"}}},
		},
		{
			name:   "device losing few allocations",
			build:  func(t *testing.T) *harness { return recLosing(t, RecommendLostPerDevice-1) },
			absent: []RecommendationKind{KindDrainUnhealthy},
		},
		{
			name:   "long-running without leases",
			build:  func(t *testing.T) *harness { return recLong(t, 10, 0, 7*time.Hour) },
			want:   []recWant{{kind: KindLongRunning, prio: PriorityLow}, {kind: KindKeepPolicy}},
			absent: []RecommendationKind{KindShortRunning},
		},
		{
			name:   "long-running with leases",
			build:  func(t *testing.T) *harness { return recLong(t, 10, 8*time.Hour, 7*time.Hour) },
			absent: []RecommendationKind{KindLongRunning},
		},
		{
			name:   "long-running, too few",
			build:  func(t *testing.T) *harness { return recLong(t, RecommendMinSamples-1, 0, 7*time.Hour) },
			absent: []RecommendationKind{KindLongRunning},
		},
		{
			name:   "short allocations",
			build:  func(t *testing.T) *harness { return recQuick(t, 10, 10*time.Second) },
			want:   []recWant{{kind: KindShortRunning, prio: PriorityLow}, {kind: KindKeepPolicy}},
			absent: []RecommendationKind{KindLongRunning},
		},
		{
			name:   "five-minute allocations",
			build:  func(t *testing.T) *harness { return recQuick(t, 10, 5*time.Minute) },
			want:   []recWant{{kind: KindKeepPolicy, prio: PriorityLow}},
			absent: []RecommendationKind{KindShortRunning, KindLongRunning, KindAddCapacity, KindSwitchPolicy, KindRebalance, KindDrainUnhealthy},
			check: func(t *testing.T, recs []Recommendation) {
				if r := findRec(recs, KindKeepPolicy, ""); r.Evidence["success_rate"] != 1 || !near(r.Confidence, 10.0/30) {
					t.Errorf("keep %+v, want success rate 1, confidence 1/3", r)
				}
			},
		},
		{
			name: "no requests yet",
			build: func(t *testing.T) *harness {
				h := newHarness(t)
				h.must(host("h1", gpu("g1", 16)))
				return h
			},
			want: []recWant{{kind: KindKeepPolicy, prio: PriorityLow}},
			check: func(t *testing.T, recs []Recommendation) {
				if len(recs) != 1 || recs[0].Confidence != 0 {
					t.Errorf("recs %+v, want one keep_policy with confidence 0", recs)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.build(t)
			recs := h.s.Recommend(GPU)
			for _, w := range tc.want {
				r := findRec(recs, w.kind, w.pool)
				switch {
				case r == nil:
					t.Errorf("no %s for pool %q in %+v", w.kind, w.pool, recs)
				case w.prio != "" && r.Priority != w.prio:
					t.Errorf("%s priority %s, want %s", w.kind, r.Priority, w.prio)
				case r.Policy != w.policy:
					t.Errorf("%s suggests policy %q, want %q", w.kind, r.Policy, w.policy)
				case w.devices != nil && !reflect.DeepEqual(r.Devices, w.devices):
					t.Errorf("%s names devices %v, want %v", w.kind, r.Devices, w.devices)
				case r.Type != GPU || r.Message == "" || r.Evidence == nil || r.Confidence < 0 || r.Confidence > 1:
					t.Errorf("malformed %+v", r)
				}
			}
			for _, k := range tc.absent {
				for _, r := range recs {
					if r.Kind == k {
						t.Errorf("unexpected %s: %s (evidence %v)", k, r.Message, r.Evidence)
					}
				}
			}
			if tc.check != nil {
				tc.check(t, recs)
			}
			for i := 1; i < len(recs); i++ {
				if recs[i-1].Priority.rank() > recs[i].Priority.rank() {
					t.Errorf("%s (%s) sorted before %s (%s)", recs[i-1].Kind, recs[i-1].Priority, recs[i].Kind, recs[i].Priority)
				}
			}
			a, _ := json.Marshal(recs)
			b, _ := json.Marshal(h.s.Recommend(""))
			if string(a) != string(b) {
				t.Errorf("Recommend(GPU) and Recommend(\"\") differ on a GPU-only state:\n%s\n%s", a, b)
			}
			if other := h.s.Recommend(CPU); len(other) != 0 {
				t.Errorf("CPU recommendations on a GPU-only state: %+v", other)
			}
		})
	}
}

func TestRecommendUnknownType(t *testing.T) {
	h := recTimeouts(t, BestFit, func(i int) int { return i })
	if got := h.s.Recommend("Quantum"); len(got) != 0 {
		t.Fatalf("recommendations for an unknown type: %+v", got)
	}
}

func TestRecommendOrder(t *testing.T) {
	h := recTimeouts(t, BestFit, func(i int) int { return 10 * i })
	h.must(&SetDeviceStatus{DeviceID: "g1", Status: Unhealthy})
	var got []string
	for _, r := range h.s.Recommend(GPU) {
		got = append(got, fmt.Sprintf("%s/%s/%s", r.Priority, r.Kind, r.Pool))
	}
	want := []string{"high/add_capacity/", "high/drain_unhealthy/default", "high/switch_policy/"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

func TestConfidence(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want float64
	}{{0, 0}, {-1, 0}, {RecommendConfidenceHalf, 0.5}, {3 * RecommendConfidenceHalf, 0.75}} {
		if got := confidence(tc.n); !near(got, tc.want) {
			t.Errorf("confidence(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
	for n := 1; n < 1000; n++ {
		if confidence(n) <= confidence(n-1) || confidence(n) >= 1 {
			t.Fatalf("confidence(%d) = %v does not grow within (0, 1)", n, confidence(n))
		}
	}
}

// TestRecommendRaiseQuota: a namespace refused for its quota again and
// again while most GPUs are idle is advised a higher quota, with the
// evidence; the same refusals on a busy cluster are not.
func TestRecommendRaiseQuota(t *testing.T) {
	for _, busy := range []bool{false, true} {
		h := newHarness(t)
		var devs []DeviceSpec
		for i := range 8 {
			devs = append(devs, gpu(fmt.Sprintf("g%d", i), 80))
		}
		h.must(host("h1", devs...))
		one := 1
		h.must(&SetQuota{Quota: Quota{Namespace: "team-a", Limits: []QuotaLimit{{DeviceType: GPU, MaxCount: &one}}}})
		if busy {
			h.must(&Allocate{Request: gpus(6, "")})
		}
		h.must(inNamespace(&Allocate{Request: gpus(1, "")}, "team-a"))
		for range 12 {
			if r := h.apply(inNamespace(&Allocate{Request: gpus(1, "")}, "team-a")); r.Err == nil {
				t.Fatal("placed past the quota")
			}
		}
		var got []Recommendation
		for _, r := range h.s.Recommend(GPU) {
			if r.Kind == KindRaiseQuota {
				got = append(got, r)
			}
		}
		if busy {
			if len(got) != 0 {
				t.Fatalf("busy cluster: %+v", got)
			}
			continue
		}
		if len(got) != 1 || got[0].Namespace != "team-a" || got[0].Evidence["over_quota"] != 12 || got[0].Evidence["decided"] != 13 ||
			got[0].Evidence["max_count"] != 1 || got[0].Evidence["utilisation"] >= RecommendQuotaIdle {
			t.Fatalf("raise_quota advice %+v", got)
		}
		if ref := h.s.recommendFromScratch(GPU); fmt.Sprint(ref) != fmt.Sprint(h.s.Recommend(GPU)) {
			t.Fatalf("reference %+v\nwant %+v", ref, h.s.Recommend(GPU))
		}
	}
}
