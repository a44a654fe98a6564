package fsm_test

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// TestGangRandom applies random logs made mostly of gangs to a small GPU
// cluster in two racks. TestRandomLog's log, with every kind of command,
// reaches a gang reservation only a few times in 10,000 commands; here
// each seed reserves capacity for waiting gangs and serves them from the
// queue dozens of times, under every policy, with priorities (preemption
// under PriorityBased), three namespaces with GPU quotas that may borrow
// (and reclaim), fair share on and off, GPUs linked by NVLink in islands
// and gangs whose parts require it,
// timeouts, leases, releases, cancels, hosts that go down and come back,
// and drains. After every command:
//   - the state's invariants hold (CheckInvariants: no device over
//     committed, a gang's devices whole on at most MaxHosts hosts, only
//     the first waiting gang of a type reserves, no waiting gang could be
//     placed now);
//   - so do those of the public view, judged apart from the placer: no
//     waiting request surely fits now (for a gang: on free hosts not
//     reserved for another gang), nothing waits past its deadline after a
//     tick, every gang whole;
//   - the events recorded make lifecycles that agree with the state;
//   - every allocation placed keeps its namespace within its quota, or
//     borrows, and a reclaim's grace ends in time;
//   - a host reserved for a gang before and after the command took no
//     new work of the gang's type from a request behind the gang in the
//     queue, so those cannot starve it, not even for the moment a
//     reservation passes to a gang ahead and back;
//
// and every 50 commands a replica that applied the same entries, decoded
// from their bytes, writes the same snapshot; half way through, the
// replica is replaced by one restored from the primary's snapshot.
func TestGangRandom(t *testing.T) {
	base := logSeed(t)
	preempting := 0
	for seed := base; seed < base+4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { preempting += runGangLog(t, seed, 2000)["gang placed by preemption"] })
	}
	if preempting == 0 {
		t.Errorf("seeds %d-%d: no gang was placed by preemption", base, base+3)
	}
}

// TestGangRandomFound replays the seeds of TestGangRandom's log that once
// found a fault, so that each stays fixed whatever seed the sweep draws.
func TestGangRandomFound(t *testing.T) {
	for _, seed := range []int64{
		// A release let a gang be placed on its reservation in the middle
		// of a pass over the queue; a request of higher priority later in
		// the pass preempted it, and the pass then reached the gang's own
		// turn: a nil allocation, and every replica panicked.
		1796646296939642625,
	} {
		t.Run(fmt.Sprint(seed), func(t *testing.T) { runGangLog(t, seed, 2000) })
	}
}

// gangLogHosts is the cluster of TestGangRandom: hosts of 4 and 8 GPUs in
// racks r0 and r1.
var gangLogHosts = []struct {
	id, rack string
	gpus     int
}{
	{"g0", "r0", 4}, {"g1", "r0", 4}, {"g2", "r0", 4}, {"g3", "r0", 8},
	{"g4", "r1", 4}, {"g5", "r1", 4}, {"g6", "r1", 8}, {"g7", "r1", 4},
}

// gangLogLinks is the topology of GPU j of a host of n: the 8-GPU hosts
// have two NVLink islands of 4 (SYS between them), the 4-GPU hosts g0-g2
// NVLink between all, g4, g5 and g7 NVLink pairs (PIX between them).
func gangLogLinks(host string, j, n int) *fsm.Topology {
	t := &fsm.Topology{Links: map[string]string{}}
	for k := range n {
		switch {
		case k == j:
			continue
		case n == 8 && j/4 != k/4:
			t.Links[fmt.Sprintf("%s-gpu%d", host, k)] = "SYS"
		case n == 8 || host < "g3" || j/2 == k/2:
			t.Links[fmt.Sprintf("%s-gpu%d", host, k)] = "NV12"
		default:
			t.Links[fmt.Sprintf("%s-gpu%d", host, k)] = "PIX"
		}
	}
	return t
}

// runGangLog applies n random commands of TestGangRandom's mix with seed,
// checking after each, and returns how often each kind of command and
// outcome occurred.
func runGangLog(t *testing.T, seed int64, n int) map[string]int {
	rng := rand.New(rand.NewSource(seed))
	primary, replica := fsm.New(), fsm.New()
	primary.EnableEvents()
	events := newEventCheck()
	now := randomLogStart
	idx := uint64(0)
	stats := map[string]int{}
	apply := func(c fsm.Command) fsm.Result {
		t.Helper()
		idx++
		fsm.Stamp(c, time.Unix(0, now))
		raw, err := fsm.Encode(c)
		if err != nil {
			t.Fatalf("seed %d, command %d: encode %T: %v", seed, idx, c, err)
		}
		res := primary.Apply(idx, c)
		again, err := fsm.Decode(raw)
		if err != nil {
			t.Fatalf("seed %d, command %d: decode: %v", seed, idx, err)
		}
		if got := replica.Apply(idx, again); !bytes.Equal(resultJSON(got), resultJSON(res)) {
			t.Fatalf("seed %d, command %d: the replica's result differs:\n%s\n%s", seed, idx, resultJSON(res), resultJSON(got))
		}
		return res
	}
	for _, h := range gangLogHosts {
		c := &fsm.RegisterHost{Host: fsm.HostSpec{ID: h.id, Labels: map[string]string{"rack": h.rack}}}
		for j := range h.gpus {
			c.Devices = append(c.Devices, fsm.DeviceSpec{ID: fmt.Sprintf("%s-gpu%d", h.id, j), Type: fsm.GPU, Name: "a100",
				Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: 80}}, Topology: gangLogLinks(h.id, j, h.gpus)})
		}
		if r := apply(c); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	// extra draws what the log gained later (NVLink gangs), so that the
	// rest of a seed's log stays as it was.
	extra := rand.New(rand.NewSource(seed ^ 0x11c))
	setPolicy := func() fsm.Command {
		pol := fsm.Policies[rng.Intn(len(fsm.Policies))]
		return &fsm.SetPolicy{DeviceType: fsm.GPU, Config: fsm.PolicyConfig{Policy: pol, PreemptionGap: []int{0, 10, 50}[rng.Intn(3)]}}
	}
	apply(setPolicy())
	primary.TakeEvents() // the setup's; the lifecycles start after it
	// pickLive draws one of the view's live allocations in the given
	// status, nil when there is none.
	pickLive := func(v *publicView, status fsm.AllocStatus) *fsm.Allocation {
		var out []*fsm.Allocation
		for _, a := range v.live {
			if a.Status == status {
				out = append(out, a)
			}
		}
		if len(out) == 0 {
			return nil
		}
		return out[rng.Intn(len(out))]
	}
	view := observe(primary)
	for i := 0; i < n; i++ {
		now += int64(rng.Intn(2000)) * int64(time.Millisecond)
		var cmd fsm.Command
		kind := ""
		switch r := rng.Intn(100); {
		case r < 32:
			req := fsm.Request{Claims: []fsm.Claim{{Type: fsm.GPU, Count: 3 + rng.Intn(10)}}, MaxHosts: 2 + rng.Intn(3),
				Priority: []int{0, 10, 50, 100}[rng.Intn(4)]}
			if rng.Intn(4) == 0 {
				req.MinPerHost = min(1+rng.Intn(3), req.Claims[0].Count)
			}
			if rng.Intn(3) == 0 {
				req.Same = "rack"
			}
			if rng.Intn(10) > 0 {
				req.Timeout = time.Duration(10+rng.Intn(600)) * time.Second
			}
			if extra.Intn(6) == 0 {
				req.Claims[0].Topology = fsm.TopologyNVLink
			}
			cmd, kind = &fsm.Allocate{Request: req}, "gang"
		case r < 52:
			req := fsm.Request{Claims: []fsm.Claim{{Type: fsm.GPU, Count: 1 + rng.Intn(2)}}, Priority: []int{0, 10, 50, 100}[rng.Intn(4)]}
			if rng.Intn(2) == 0 {
				req.Timeout = time.Duration(1+rng.Intn(120)) * time.Second
			}
			if rng.Intn(4) == 0 {
				req.LeaseTTL = time.Duration(30+rng.Intn(300)) * time.Second
			}
			cmd, kind = &fsm.Allocate{Request: req}, "small"
		case r < 70:
			if a := pickLive(view, fsm.Active); a != nil {
				cmd, kind = inNamespaceOf(a, &fsm.Release{AllocationID: a.ID}), "release"
			}
		case r < 74:
			if a := pickLive(view, fsm.Pending); a != nil {
				cmd, kind = inNamespaceOf(a, &fsm.Cancel{AllocationID: a.ID}), "cancel"
			}
		case r < 89:
			now += int64(rng.Intn(60000)) * int64(time.Millisecond)
			cmd, kind = &fsm.Tick{}, "tick"
		case r < 93:
			h := view.hosts[rng.Intn(len(view.hosts))]
			cmd, kind = &fsm.SetHostStatus{HostID: h.ID, Up: !h.Up}, "host up/down"
		case r < 96:
			h := view.hosts[rng.Intn(len(view.hosts))]
			c := &fsm.DrainHost{HostID: h.ID, Enable: h.Drain == nil || h.Drain.Ended}
			if c.Enable && rng.Intn(2) == 0 {
				c.Deadline = time.Duration(1+rng.Intn(120)) * time.Second
			}
			cmd, kind = c, "drain"
		case r < 97:
			cmd, kind = setPolicy(), "set policy"
		case r < 98:
			// A GPU quota for a team, which may borrow past it.
			q := fsm.Quota{Namespace: []string{"team-a", "team-b"}[rng.Intn(2)]}
			if rng.Intn(4) > 0 {
				limit := rng.Intn(25)
				q.Limits = []fsm.QuotaLimit{{DeviceType: fsm.GPU, MaxCount: &limit}}
				if rng.Intn(2) == 0 {
					q.Borrow, q.ReclaimGrace = true, time.Duration(rng.Intn(3))*10*time.Second
				}
			}
			if _, set := primary.QuotaOf(q.Namespace); len(q.Limits) == 0 && set {
				cmd, kind = &fsm.SetQuota{Quota: q, Delete: true}, "quota"
			} else if len(q.Limits) > 0 {
				cmd, kind = &fsm.SetQuota{Quota: q}, "quota"
			}
		default:
			c := &fsm.SetQueueConfig{PreemptWaiting: rng.Intn(2) == 0}
			if rng.Intn(3) > 0 {
				c.FairShare, c.HalfLife = true, time.Duration(rng.Intn(3))*5*time.Minute
			}
			cmd, kind = c, "queue config"
		}
		if a, ok := cmd.(*fsm.Allocate); ok {
			fsm.SetNamespace(a, []string{fsm.DefaultNamespace, "team-a", "team-b"}[rng.Intn(3)])
		}
		if cmd == nil {
			continue
		}
		stats[kind]++
		res := apply(cmd)
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d, command %d (%s): %s", seed, idx, kind, fmt.Sprintf(format, args...))
		}
		if err := primary.CheckInvariants(); err != nil {
			fail("invariant violated: %v", err)
		}
		applied := appliedAnew(res, idx)
		if err := events.step(primary, idx, applied, primary.TakeEvents()); err != nil {
			fail("events: %v", err)
		}
		prev := view
		view = observe(primary)
		if err := view.check(kind == "tick" && res.Err == nil); err != nil {
			fail("public view: %v", err)
		}
		if err := view.reservationsKept(prev); err != nil {
			fail("%v", err)
		}
		if err := view.reservationsCanHold(prev); err != nil {
			fail("%v", err)
		}
		if err := view.checkQuotas(prev, primary); err != nil {
			fail("quota: %v", err)
		}
		if err := view.checkReclaims(kind == "tick" && res.Err == nil); err != nil {
			fail("reclaim: %v", err)
		}
		for _, k := range view.transitions(prev, primary) {
			stats[k]++
		}
		if kind == "gang" && res.Err == nil && res.Allocation.Status == fsm.Active && len(res.Allocation.Preempted) > 0 {
			stats["gang placed by preemption"]++
		}
		if i%50 == 49 || i == n-1 {
			snap := primary.SnapshotBytes()
			if !bytes.Equal(snap, replica.SnapshotBytes()) {
				fail("the replicas' snapshots differ")
			}
			if i == n/2+49 {
				// From here on the replica is one restored from the
				// primary's snapshot (reservations rebuilt by host).
				r, err := fsm.Restore(bytes.NewReader(snap))
				if err != nil {
					fail("restore: %v", err)
				}
				replica = r
			}
		}
	}
	t.Logf("seed %d: %v", seed, stats)
	// Each seed must have exercised what this test is for.
	for _, want := range []struct {
		kind  string
		least int
	}{{"gang across hosts", 1}, {"gang reserved", 5}, {"gang served from queue", 5}} {
		if stats[want.kind] < want.least {
			t.Errorf("seed %d: %q %d times, want at least %d", seed, want.kind, stats[want.kind], want.least)
		}
	}
	return stats
}

// reservationsCanHold checks that a reservation made by the command is on
// hosts that could take the gang together were their devices free: each
// counts the devices that pass the gang's filters (for an NVLink gang,
// its largest set of them linked so pairwise), the hosts that count at
// least the gang's minimum per host add up to its count.
func (v *publicView) reservationsCanHold(prev *publicView) error {
	for _, a := range v.queue {
		p := prev.liveByID[a.ID]
		if len(a.Reserved) == 0 || p != nil && slices.Equal(p.Reserved, a.Reserved) {
			continue
		}
		r := &a.Request
		sum := 0
		for _, id := range a.Reserved {
			var devs []*fsm.Device
			for _, d := range v.devs {
				if d.Host == id && d.Type == r.Claims[0].Type && d.Status == fsm.Available && staticMismatch(&d, r, 0) == "" {
					devs = append(devs, &d)
				}
			}
			n := len(devs)
			if r.Claims[0].Topology == fsm.TopologyNVLink {
				for n > 1 && !nvlinkClique(devs, nil, n) {
					n--
				}
			}
			if n >= max(r.MinPerHost, 1) {
				sum += n
			}
		}
		if sum < r.Claims[0].Count {
			return fmt.Errorf("gang %s (%d GPUs, nvlink %v) reserved %v, which could take %d of it", a.ID, r.Claims[0].Count, r.Claims[0].Topology != "", a.Reserved, sum)
		}
	}
	return nil
}

// reservationsKept checks that a host reserved for a waiting gang before a
// command, and still reserved for it after, took no new allocation on a
// device of the gang's type from a request that comes after the gang in
// the queue: a reservation holds the capacity it gathers.
func (v *publicView) reservationsKept(prev *publicView) error {
	for _, h := range slices.Sorted(maps.Keys(prev.reserved)) {
		g := prev.reserved[h]
		if now := v.reserved[h]; now == nil || now.ID != g.ID {
			continue
		}
		host := v.hostByID[h]
		if host == nil {
			continue
		}
		for _, id := range host.Devices {
			d, before := v.devByID[id], prev.devByID[id]
			if d == nil || d.Type != g.Request.Claims[0].Type {
				continue
			}
			for _, aid := range d.Allocations {
				if before != nil && slices.Contains(before.Allocations, aid) {
					continue
				}
				// A request that comes before the gang in the queue may
				// take it: a gang takes the reservation over, a one-host
				// request is placed ahead (placeAhead).
				if a := v.liveByID[aid]; a != nil && comesBefore(a, g) {
					continue
				}
				return fmt.Errorf("host %s is reserved for gang %s, yet allocation %s took its device %s", h, g.ID, aid, id)
			}
		}
	}
	return nil
}
