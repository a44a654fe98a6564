package fsm

import (
	"math"
	"math/rand"
	"slices"
	"sort"
	"testing"
	"time"
)

// TestFairShareOrder: with fair share on, each GPU a release frees goes
// to the waiting request of the namespace below its share with the
// lowest score (devices held now and lately, per weight), however the
// requests arrived, and to the queue's first request (priority, then
// arrival) when no waiting namespace is below its share; within a
// namespace, the higher priority first. Randomized: three namespaces of
// weights 1, 2 and 4 ask for one GPU at a time on a full cluster, and
// every release is checked against the scores just before it.
func TestFairShareOrder(t *testing.T) {
	for seed := int64(1); seed <= 5; seed++ {
		rng := rand.New(rand.NewSource(seed))
		h := newHarness(t)
		var devs []DeviceSpec
		for i := range 8 {
			devs = append(devs, gpu("g"+string(rune('a'+i)), 80))
		}
		h.must(host("h1", devs...))
		names := []string{"w1", "w2", "w4"}
		for i, ns := range names {
			h.must(&SetQuota{Quota: Quota{Namespace: ns, Weight: float64(int(1) << i)}})
		}
		h.must(&SetQueueConfig{FairShare: true, HalfLife: time.Minute})
		active := map[string]string{} // id → namespace
		queued := 0
		for step := 0; step < 400; step++ {
			switch r := rng.Intn(10); {
			case r < 5 || len(active) == 0:
				ns := names[rng.Intn(len(names))]
				req := gpus(1, "")
				req.Timeout, req.Priority = time.Hour, rng.Intn(3)*10
				h.must(inNamespace(&Allocate{Request: req}, ns))
			case r < 9:
				ids := make([]string, 0, len(active))
				for id := range active {
					ids = append(ids, id)
				}
				sort.Strings(ids)
				id := ids[rng.Intn(len(ids))]
				// The scores just before the release, the released device
				// taken off its namespace.
				_, _, use := h.s.FairShare()
				score, weight, member := map[string]float64{}, map[string]float64{}, map[string]bool{}
				for _, u := range use {
					held := u.Held
					if u.Namespace == active[id] {
						held--
					}
					score[u.Namespace] = (float64(held) + u.Recent) / u.Weight
					weight[u.Namespace] = u.Weight
					member[u.Namespace] = held > 0 || u.Recent > 0
				}
				queue := h.s.Queue()
				bestPrio := map[string]int{}
				for _, a := range queue {
					if _, ok := bestPrio[a.Namespace]; !ok {
						bestPrio[a.Namespace] = a.Request.Priority // the queue's order: highest first
					}
					member[a.Namespace] = true
					if _, ok := weight[a.Namespace]; !ok {
						weight[a.Namespace] = float64(int(1) << slices.Index(names, a.Namespace))
					}
				}
				// The share line: every member's score, weighted.
				var sum, weights float64
				for ns, m := range member {
					if m {
						sum += score[ns] * weight[ns]
						weights += weight[ns]
					}
				}
				mean := sum / weights
				// A namespace below its share with the lowest score is
				// served; when none waits, the queue's first request.
				best := map[string]bool{}
				low := math.Inf(1)
				for _, a := range queue {
					if score[a.Namespace] < mean-1e-3 {
						low = math.Min(low, score[a.Namespace])
					}
				}
				for _, a := range queue {
					if score[a.Namespace] <= low+1e-3 {
						best[a.Namespace] = true
					}
				}
				if len(best) == 0 && len(queue) > 0 {
					best[queue[0].Namespace] = true
				}
				ns := active[id]
				h.must(inNamespace(&Release{AllocationID: id}, ns))
				for _, a := range h.s.Live() {
					if _, was := active[a.ID]; was || a.Status != Active {
						continue
					}
					if !best[a.Namespace] && math.Abs(score[a.Namespace]-mean) > 1e-3 {
						t.Fatalf("seed %d step %d: the freed GPU went to %s (score %.4f), not to %v (share line %.4f): %v", seed, step, a.Namespace, score[a.Namespace], best, mean, score)
					}
					if a.Request.Priority != bestPrio[a.Namespace] {
						t.Fatalf("seed %d step %d: %s served priority %d before %d", seed, step, a.Namespace, a.Request.Priority, bestPrio[a.Namespace])
					}
					queued++
				}
			default:
				h.advance(time.Duration(rng.Intn(60)) * time.Second)
			}
			for id := range active {
				delete(active, id)
			}
			for _, a := range h.s.Live() {
				if a.Status == Active {
					active[a.ID] = a.Namespace
				}
			}
		}
		if queued < 50 {
			t.Fatalf("seed %d: only %d requests served from the queue", seed, queued)
		}
		assertRoundTrip(t, h.s)
	}
}

// TestFairShareShares: two namespaces, weights 1 and 3, keep the cluster
// full of one-GPU jobs of equal length; over time, what each holds
// approaches its weight's share (a quarter and three quarters), where
// arrival order alone would give each half.
func TestFairShareShares(t *testing.T) {
	for _, fair := range []bool{false, true} {
		h := twoTeams(t, "small", "big", fair, 10*time.Minute)
		var running []fairJob
		var clock time.Duration
		held := map[string]time.Duration{} // GPU-time per namespace
		submit := func(ns string) {
			req := gpus(1, "")
			req.Timeout = 24 * time.Hour
			h.must(inNamespace(&Allocate{Request: req}, ns))
		}
		// Each namespace always has 20 jobs waiting, arriving alternately.
		for range 20 {
			submit("small")
			submit("big")
		}
		for clock < 10*time.Hour {
			for _, a := range h.s.Live() {
				if a.Status == Active && !containsJob(running, a.ID) {
					running = append(running, fairJob{id: a.ID, ns: a.Namespace, end: clock + 5*time.Minute})
				}
			}
			sort.Slice(running, func(i, j int) bool {
				return running[i].end < running[j].end || (running[i].end == running[j].end && running[i].id < running[j].id)
			})
			next := running[0]
			for _, j := range running {
				held[j.ns] += next.end - clock
			}
			h.advance(next.end - clock)
			clock = next.end
			running = running[1:]
			h.must(inNamespace(&Release{AllocationID: next.id}, next.ns))
			submit(next.ns)
		}
		share := float64(held["big"]) / float64(held["big"]+held["small"])
		want := 0.5
		if fair {
			want = 0.75
		}
		if math.Abs(share-want) > 0.05 {
			t.Fatalf("fair share %v: big held %.3f of the GPU time, want about %.2f", fair, share, want)
		}
	}
}

type fairJob struct {
	id, ns string
	end    time.Duration
}

func containsJob(list []fairJob, id string) bool {
	for _, j := range list {
		if j.id == id {
			return true
		}
	}
	return false
}

// TestFairShareWorkedExample is the example of fsm/DESIGN.md ("Fair
// share"): a (weight 1) and b (weight 3) have held 6 and 2 of 8 GPUs for a
// day at a half-life of an hour, and both wait, a first. The GPU a
// releases goes to b with fair share on, to a without.
func TestFairShareWorkedExample(t *testing.T) {
	for _, fair := range []bool{false, true} {
		h := twoTeams(t, "a", "b", fair, time.Hour)
		var aIDs []string
		for range 6 {
			aIDs = append(aIDs, h.must(inNamespace(&Allocate{Request: gpus(1, "")}, "a")).Allocation.ID)
		}
		for range 2 {
			h.must(inNamespace(&Allocate{Request: gpus(1, "")}, "b"))
		}
		h.advance(24 * time.Hour)
		req := gpus(1, "")
		req.Timeout = time.Hour
		waitA := h.must(inNamespace(&Allocate{Request: req}, "a")).Allocation.ID
		waitB := h.must(inNamespace(&Allocate{Request: req}, "b")).Allocation.ID
		if fair {
			_, _, use := h.s.FairShare()
			for _, u := range use {
				want := map[string]float64{"a": 12, "b": 4.0 / 3}[u.Namespace]
				if got := (float64(u.Held) + u.Recent) / u.Weight; math.Abs(got-want) > 0.01 {
					t.Fatalf("%s scores %.3f, want %.3f", u.Namespace, got, want)
				}
			}
		}
		h.must(inNamespace(&Release{AllocationID: aIDs[0]}, "a"))
		served, kept := waitB, waitA
		if !fair {
			served, kept = waitA, waitB
		}
		if a, _ := h.s.Allocation(served); a.Status != Active {
			t.Fatalf("fair share %v: %s is %s, want active", fair, served, a.Status)
		}
		if a, _ := h.s.Allocation(kept); a.Status != Pending {
			t.Fatalf("fair share %v: %s is %s, want still pending", fair, kept, a.Status)
		}
	}
}

// twoTeams is a host of 8 GPUs and two namespaces of weights 1 and 3,
// with fair share on (at half-life hl) when fair.
func twoTeams(t *testing.T, light, heavy string, fair bool, hl time.Duration) *harness {
	h := newHarness(t)
	var devs []DeviceSpec
	for i := range 8 {
		devs = append(devs, gpu("g"+string(rune('a'+i)), 80))
	}
	h.must(host("h1", devs...))
	h.must(&SetQuota{Quota: Quota{Namespace: light, Weight: 1}})
	h.must(&SetQuota{Quota: Quota{Namespace: heavy, Weight: 3}})
	if fair {
		h.must(&SetQueueConfig{FairShare: true, HalfLife: hl})
	}
	return h
}
