package fsm

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// gangHost is a host of n 80 GB GPUs, IDs <host>-g0.., with labels kv.
func gangHost(id string, n int, kv ...string) *RegisterHost {
	c := host(id)
	for i := range n {
		c.Devices = append(c.Devices, gpu(fmt.Sprintf("%s-g%d", id, i), 80))
	}
	if len(kv) > 0 {
		c.Host.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			c.Host.Labels[kv[i]] = kv[i+1]
		}
	}
	return c
}

// labelledHost is gangHost whose devices carry the label host=<id>, for
// holdOn.
func labelledHost(id string, n int, kv ...string) *RegisterHost {
	c := gangHost(id, n, kv...)
	for j := range c.Devices {
		c.Devices[j].Labels = map[string]string{"host": id}
	}
	return c
}

// gangReq asks for n GPUs over at most k hosts.
func gangReq(n, k int) Request {
	return Request{Claims: []Claim{{Type: GPU, Count: n}}, MaxHosts: k}
}

// holdOn takes n GPUs on host id with a one-host request it pins there.
func holdOn(h *harness, id string, n int, prio int) *Allocation {
	h.t.Helper()
	r := Request{Claims: []Claim{{Type: GPU, Count: n}}, Priority: prio,
		Labels: LabelSelector{Required: map[string]string{"host": id}}}
	return h.must(&Allocate{Request: r}).Allocation
}

// perHost counts an allocation's devices of claim 0 by host.
func perHost(s *State, a *Allocation) map[string]int {
	out := map[string]int{}
	for _, as := range a.Devices {
		if as.Claim == 0 {
			out[s.devices[as.DeviceID].Host]++
		}
	}
	return out
}

// TestGangPlacement places gangs under each kind of policy and checks
// the hosts and parts each takes.
func TestGangPlacement(t *testing.T) {
	cases := []struct {
		name   string
		policy Policy
		// used GPUs per host before the gang (hosts h1..h4, 8 GPUs each,
		// racks a: h1 h2, b: h3 h4).
		used [4]int
		req  Request
		want map[string]int // nil: refused
	}{
		{"BestFit packs the fewest hosts", BestFit, [4]int{}, gangReq(16, 4), map[string]int{"h1": 8, "h2": 8}},
		{"BestFit puts the rest on the fullest host", BestFit, [4]int{0, 0, 4, 0}, gangReq(12, 4), map[string]int{"h1": 8, "h3": 4}},
		{"FirstFit by host ID", FirstFit, [4]int{0, 0, 4, 0}, gangReq(12, 4), map[string]int{"h1": 8, "h2": 4}},
		{"WorstFit spreads evenly", WorstFit, [4]int{}, gangReq(16, 4), map[string]int{"h1": 4, "h2": 4, "h3": 4, "h4": 4}},
		{"WorstFit spreads over the freest hosts", WorstFit, [4]int{2, 0, 0, 0}, gangReq(9, 3), map[string]int{"h2": 3, "h3": 3, "h4": 3}},
		{"LoadBalanced spreads", LoadBalanced, [4]int{1, 0, 0, 0}, gangReq(6, 2), map[string]int{"h2": 3, "h3": 3}},
		{"a spreader without an even split packs", WorstFit, [4]int{1, 7, 7, 7}, gangReq(8, 2), map[string]int{"h1": 7, "h2": 1}},
		{"a part never below the minimum", BestFit, [4]int{0, 3, 8, 8}, Request{Claims: []Claim{{Type: GPU, Count: 10}}, MaxHosts: 2, MinPerHost: 5},
			map[string]int{"h1": 5, "h2": 5}},
		{"one rack", BestFit, [4]int{2, 0, 0, 0}, Request{Claims: []Claim{{Type: GPU, Count: 16}}, MaxHosts: 2, Same: "rack"},
			map[string]int{"h3": 8, "h4": 8}},
		{"too few hosts", BestFit, [4]int{1, 1, 1, 1}, gangReq(16, 2), nil},
		{"no rack has enough", BestFit, [4]int{2, 0, 0, 2}, Request{Claims: []Claim{{Type: GPU, Count: 16}}, MaxHosts: 4, Same: "rack"}, nil},
		{"a gang that fits one host stays on one", BestFit, [4]int{}, gangReq(8, 4), map[string]int{"h1": 8}},
		{"FragmentationAware packs", FragmentationAware, [4]int{0, 0, 4, 0}, gangReq(12, 4), map[string]int{"h1": 8, "h3": 4}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			for i, id := range []string{"h1", "h2", "h3", "h4"} {
				h.must(labelledHost(id, 8, "rack", map[bool]string{true: "a", false: "b"}[i < 2]))
			}
			for i, n := range tc.used {
				if n > 0 {
					holdOn(h, fmt.Sprintf("h%d", i+1), n, 0)
				}
			}
			polSet(h, GPU, tc.policy)
			res := h.apply(&Allocate{Request: tc.req})
			if err := h.s.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
			if tc.want == nil {
				if res.Err == nil || res.Allocation.WhyNot == nil || res.Allocation.WhyNot.Gang == nil {
					t.Fatalf("placed or refused without a gang why-not: %+v", res)
				}
				return
			}
			if res.Err != nil {
				t.Fatalf("refused: %v", res.Err)
			}
			a := res.Allocation
			if got := perHost(h.s, a); !mapsEqual(got, tc.want) {
				t.Fatalf("parts %v, want %v", got, tc.want)
			}
			hosts := slices.Sorted(func(yield func(string) bool) {
				for k := range tc.want {
					if !yield(k) {
						return
					}
				}
			})
			if len(tc.want) > 1 && !slices.Equal(a.Hosts, hosts) || a.Host != hosts[0] {
				t.Fatalf("hosts %v (host %s), want %v", a.Hosts, a.Host, hosts)
			}
		})
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestGangWhyNot: a refused gang says per host and per domain what it
// could take.
func TestGangWhyNot(t *testing.T) {
	h := newHarness(t)
	h.must(gangHost("h1", 8, "rack", "a"))
	h.must(gangHost("h2", 8, "rack", "a"))
	h.must(gangHost("h3", 8, "rack", "b"))
	h.must(gangHost("h4", 8))
	h.must(&Allocate{Request: gangReq(6, 1)})
	res := h.apply(&Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 20}}, MaxHosts: 2, Same: "rack"}})
	if res.Err == nil {
		t.Fatal("placed")
	}
	g := res.Allocation.WhyNot.Gang
	want := &GangWhyNot{Count: 20, MaxHosts: 2, MinPerHost: 1, Same: "rack", HostsAble: 3,
		Best: []GangHost{{"h2", 8}, {"h1", 2}}, BestTotal: 10,
		Domains:         []GangDomain{{Value: "a", HostsAble: 2, Total: 10}, {Value: "b", HostsAble: 1, Total: 8}},
		HostsUnlabelled: 1}
	if fmt.Sprint(g) != fmt.Sprint(want) {
		t.Fatalf("gang why-not\n got %+v\nwant %+v", g, want)
	}
	sum := res.Allocation.WhyNot.Summary
	for _, part := range []string{"gang of 20 x GPU", "the best 2 take 10 of 20 (h2 8, h1 2)", "best rack a", "1 hosts without label rack"} {
		if !strings.Contains(sum, part) {
			t.Errorf("summary %q lacks %q", sum, part)
		}
	}
}

// TestGangReservation: a waiting gang reserves hosts; small requests keep
// off them and go elsewhere; as the reserved hosts free, the gang is
// placed there, whole; its reservation survives a snapshot.
func TestGangReservation(t *testing.T) {
	h := newHarness(t)
	for _, id := range []string{"h1", "h2", "h3"} {
		h.must(labelledHost(id, 4))
	}
	small := map[string]*Allocation{}
	for _, id := range []string{"h1", "h2", "h3"} {
		small[id] = holdOn(h, id, 1, 0)
	}
	g := h.must(&Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 8}}, MaxHosts: 2, Timeout: time.Hour}}).Allocation
	if g.Status != Pending || len(g.Reserved) != 2 {
		t.Fatalf("gang %s reserved %v", g.Status, g.Reserved)
	}
	free := ""
	for _, id := range []string{"h1", "h2", "h3"} {
		if !slices.Contains(g.Reserved, id) {
			free = id
		}
	}
	// A one-GPU request goes to the host left out, not the reserved ones.
	for range 3 {
		a := h.must(&Allocate{Request: polGPU(1)}).Allocation
		if a.Host != free {
			t.Fatalf("a small request went to %s, reserved for the gang (%v)", a.Host, g.Reserved)
		}
	}
	res := h.apply(&Allocate{Request: polGPU(1)})
	if res.Err == nil || !strings.Contains(res.Err.Error(), "reserved for a waiting gang") {
		t.Fatalf("a small request with only reserved GPUs free: %v", res.Err)
	}
	// The reservation survives a snapshot, byte for byte.
	var b1, b2 bytes.Buffer
	if err := h.s.Snapshot(&b1); err != nil {
		t.Fatal(err)
	}
	r, err := Restore(bytes.NewReader(b1.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if err := r.Snapshot(&b2); err != nil || !bytes.Equal(b1.Bytes(), b2.Bytes()) {
		t.Fatalf("restored snapshot differs (%v)", err)
	}
	// Free the reserved hosts' small allocations: the gang is placed on them.
	h.must(&Release{AllocationID: small[g.Reserved[0]].ID})
	if a, _ := h.s.Allocation(g.ID); a.Status != Pending {
		t.Fatalf("gang %s after one release", a.Status)
	}
	h.must(&Release{AllocationID: small[g.Reserved[1]].ID})
	a, _ := h.s.Allocation(g.ID)
	if a.Status != Active || !slices.Equal(a.Hosts, g.Reserved) || len(a.Reserved) != 0 {
		t.Fatalf("gang %s on %v, reserved %v (was %v)", a.Status, a.Hosts, a.Reserved, g.Reserved)
	}
	if len(h.s.reserved) != 0 {
		t.Fatalf("reservations left: %v", h.s.reserved)
	}
}

// TestGangReservationAhead: a reservation holds its hosts against the
// requests behind its gang in the queue, not against those ahead. A
// one-host request of a higher priority takes a reserved GPU when none
// other is free, and the reservation stays; one of the same priority,
// later, or of a lower one is refused for the reservation. A why-not
// counts reserved GPUs only against the requests behind.
func TestGangReservationAhead(t *testing.T) {
	h := newHarness(t)
	for _, id := range []string{"h1", "h2", "h3"} {
		h.must(labelledHost(id, 4))
		holdOn(h, id, 1, 10)
	}
	g := h.must(&Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 8}}, MaxHosts: 2, Timeout: time.Hour, Priority: 10}}).Allocation
	if g.Status != Pending || len(g.Reserved) != 2 {
		t.Fatalf("gang %s reserving %v", g.Status, g.Reserved)
	}
	one := func(prio int) Result {
		return h.apply(&Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 1}}, Priority: prio}})
	}
	// The host left out fills up: only reserved GPUs are free.
	for range 3 {
		if a := h.must(&Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 1}}, Priority: 10}}).Allocation; slices.Contains(g.Reserved, a.Host) {
			t.Fatalf("a request behind the gang took reserved host %s", a.Host)
		}
	}
	for _, tc := range []struct {
		name  string
		prio  int
		taken bool
	}{
		{"behind: the same priority, later", 10, false},
		{"behind: a lower priority", 0, false},
		{"ahead: a higher priority", 50, true},
	} {
		res := one(tc.prio)
		switch {
		case tc.taken && (res.Err != nil || !slices.Contains(g.Reserved, res.Allocation.Host)):
			t.Fatalf("%s: %v, want placed on a host of %v", tc.name, res.Err, g.Reserved)
		case !tc.taken && (res.Err == nil || !strings.Contains(res.Err.Error(), "reserved for a waiting gang")):
			t.Fatalf("%s: %v, want refused for the reservation", tc.name, res.Err)
		}
	}
	if now, _ := h.s.Allocation(g.ID); now.Status != Pending || !slices.Equal(now.Reserved, g.Reserved) {
		t.Fatalf("gang %s reserving %v after a request ahead took a GPU, was %v", now.Status, now.Reserved, g.Reserved)
	}
	// The reserved GPUs fill up with requests ahead; the next is refused,
	// and not for the reservation.
	for one(50).Err == nil {
	}
	if res := one(50); res.Err == nil || strings.Contains(res.Err.Error(), "reserved for a waiting gang") {
		t.Fatalf("a request ahead, nothing free: %v", res.Err)
	}
	if err := h.s.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}

// TestGangReservationMoves: a reservation moves to a gang that comes first
// in the queue, and off a host that goes down.
func TestGangReservationMoves(t *testing.T) {
	h := newHarness(t)
	for _, id := range []string{"h1", "h2", "h3", "h4"} {
		h.must(labelledHost(id, 2))
		holdOn(h, id, 1, 0)
	}
	low := h.must(&Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 4}}, MaxHosts: 2, Timeout: time.Hour}}).Allocation
	if len(low.Reserved) != 2 {
		t.Fatalf("first gang reserved %v", low.Reserved)
	}
	high := h.must(&Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 4}}, MaxHosts: 2, Timeout: time.Hour, Priority: 50}}).Allocation
	lowNow, _ := h.s.Allocation(low.ID)
	if len(high.Reserved) != 2 || len(lowNow.Reserved) != 0 {
		t.Fatalf("after a higher gang: high %v, low %v", high.Reserved, lowNow.Reserved)
	}
	h.must(&SetHostStatus{HostID: high.Reserved[0], Up: false})
	moved, _ := h.s.Allocation(high.ID)
	if len(moved.Reserved) != 2 || slices.Contains(moved.Reserved, high.Reserved[0]) {
		t.Fatalf("after its host went down: reserved %v (was %v)", moved.Reserved, high.Reserved)
	}
}

// TestGangPreemption: under PriorityBased a gang preempts lower work on
// several hosts, the fewest victims, and is placed whole.
func TestGangPreemption(t *testing.T) {
	h := newHarness(t)
	for _, id := range []string{"h1", "h2", "h3"} {
		h.must(labelledHost(id, 4))
	}
	polSet(h, GPU, PriorityBased)
	low := holdOn(h, "h1", 4, 0)
	mid := holdOn(h, "h2", 2, 5)
	one := holdOn(h, "h2", 1, 0)
	top := holdOn(h, "h3", 4, 100)
	r := gangReq(8, 3)
	r.Priority = 50
	res := h.must(&Allocate{Request: r})
	a := res.Allocation
	if a.Status != Active {
		t.Fatalf("gang %s: %v", a.Status, res.Err)
	}
	if got := perHost(h.s, a); !mapsEqual(got, map[string]int{"h1": 4, "h2": 4}) {
		t.Fatalf("parts %v", got)
	}
	for _, v := range []*Allocation{low, mid, one} {
		if got, _ := h.s.Allocation(v.ID); got.Status != Preempted || got.PreemptedBy != a.ID {
			t.Fatalf("victim %s: %s by %q", v.ID, got.Status, got.PreemptedBy)
		}
	}
	if got, _ := h.s.Allocation(top.ID); got.Status != Active {
		t.Fatalf("higher priority %s", got.Status)
	}
}

// TestGangPlacedThenPreemptedInOnePass: a pass over the queue places a
// gang, the next gang in line is placed on its reservation at once, and a
// request ahead of that one in the queue then preempts it, in the same
// pass. The pass must pass over the preempted gang's own turn (it once
// read a nil allocation there, and every replica panicked), under both
// queue orders.
func TestGangPlacedThenPreemptedInOnePass(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprintf("fair share %v", fair), func(t *testing.T) {
			h := newHarness(t)
			h.must(labelledHost("h1", 8))
			h.must(labelledHost("h2", 4))
			polSet(h, GPU, PriorityBased)
			h.must(&SetQueueConfig{PreemptWaiting: true, FairShare: fair})
			big := holdOn(h, "h1", 8, 100)
			holdOn(h, "h2", 4, 100)
			wait := func(r Request, prio int) *Allocation {
				t.Helper()
				r.Priority, r.Timeout = prio, time.Hour
				a := h.must(&Allocate{Request: r}).Allocation
				if a.Status != Pending {
					t.Fatalf("%v: %s, want waiting", r, a.Status)
				}
				return a
			}
			first := wait(gangReq(4, 2), 100)
			ahead := wait(Request{Claims: []Claim{{Type: GPU, Count: 4}}}, 100)
			second := wait(gangReq(4, 2), 50)
			h.must(&Release{AllocationID: big.ID})
			for _, c := range []struct {
				a    *Allocation
				want AllocStatus
			}{{first, Active}, {second, Preempted}, {ahead, Active}} {
				if got, _ := h.s.Allocation(c.a.ID); got.Status != c.want {
					t.Fatalf("%s: %s, want %s", c.a.ID, got.Status, c.want)
				}
			}
			if got, _ := h.s.Allocation(second.ID); got.PreemptedBy != ahead.ID {
				t.Fatalf("the second gang was preempted by %q, want %s", got.PreemptedBy, ahead.ID)
			}
			if err := h.s.CheckInvariants(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestGangCompanions: every claim after the first is taken whole on each
// host of the gang.
func TestGangCompanions(t *testing.T) {
	h := newHarness(t)
	for _, id := range []string{"h1", "h2"} {
		c := gangHost(id, 4)
		c.Devices = append(c.Devices, DeviceSpec{ID: id + "-cpu", Type: CPU, Shareable: true, Capabilities: Capabilities{Resources: Resources{ComputeUnits: 64}}})
		h.must(c)
	}
	r := Request{Claims: []Claim{{Type: GPU, Count: 8}, {Type: CPU, Count: 1, Amount: Resources{ComputeUnits: 16}}}, MaxHosts: 2}
	a := h.must(&Allocate{Request: r}).Allocation
	cpus := 0
	for _, as := range a.Devices {
		if as.Claim == 1 {
			cpus++
		}
	}
	if len(a.Hosts) != 2 || cpus != 2 {
		t.Fatalf("hosts %v, %d CPU shares", a.Hosts, cpus)
	}
}

// TestGangValidation: the gang fields are checked before the state.
func TestGangValidation(t *testing.T) {
	for _, tc := range []struct {
		r    Request
		want string
	}{
		{Request{Claims: []Claim{{Type: GPU, Count: 4}}, MaxHosts: -1}, "max_hosts"},
		{Request{Claims: []Claim{{Type: GPU, Count: 4}}, MinPerHost: 2}, "go with max_hosts"},
		{Request{Claims: []Claim{{Type: GPU, Count: 4}}, Same: "rack"}, "go with max_hosts"},
		{Request{Claims: []Claim{{Type: GPU, Count: 4}}, MaxHosts: 2, MinPerHost: 5}, "min_per_host"},
		{Request{Claims: []Claim{{Type: GPU, Count: 4}}, MaxHosts: 2, Same: "a b"}, "label key"},
		{Request{Claims: []Claim{{Type: GPU, Count: 4}}, MaxHosts: MaxClaimCount + 1}, "max_hosts"},
	} {
		err := Precheck(&Allocate{Request: tc.r})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.r, err, tc.want)
		}
	}
	if err := Precheck(&Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 4}}, MaxHosts: 2, MinPerHost: 2, Same: "topology.kubernetes.io/zone"}}); err != nil {
		t.Fatal(err)
	}
}

// TestGangExpectedStart: a waiting gang's expected start is when the
// leases on its reserved hosts free enough devices; unknown (0) while a
// device it needs is held without a lease.
func TestGangExpectedStart(t *testing.T) {
	h := newHarness(t)
	h.must(labelledHost("h1", 2))
	h.must(labelledHost("h2", 2))
	lease := func(id string, ttl time.Duration) *Allocation {
		r := Request{Claims: []Claim{{Type: GPU, Count: 1}}, LeaseTTL: ttl, Labels: LabelSelector{Required: map[string]string{"host": id}}}
		return h.must(&Allocate{Request: r}).Allocation
	}
	a1 := lease("h1", 10*time.Minute)
	lease("h2", 20*time.Minute)
	g := h.must(&Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 4}}, MaxHosts: 2, Timeout: time.Hour}}).Allocation
	got, _ := h.s.Allocation(g.ID)
	if want := a1.AllocatedAt + int64(20*time.Minute) + int64(time.Millisecond); got.ExpectedStart != want {
		t.Fatalf("expected start %v, want %v", time.Unix(0, got.ExpectedStart), time.Unix(0, want))
	}
	if q := h.s.Queue(); len(q) != 1 || q[0].ExpectedStart != got.ExpectedStart {
		t.Fatalf("queue %+v", q)
	}

	// A device it needs held without a lease: the start is unknown.
	h = newHarness(t)
	h.must(labelledHost("h1", 2))
	holdOn(h, "h1", 1, 0)
	g = h.must(&Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 2}}, MaxHosts: 2, Timeout: time.Hour}}).Allocation
	if got, _ := h.s.Allocation(g.ID); len(got.Reserved) != 1 || got.ExpectedStart != 0 {
		t.Fatalf("reserved %v, expected start %v with a device held without a lease", got.Reserved, got.ExpectedStart)
	}
}

// TestHeldToHost: a request held to a host takes devices there or waits,
// says why not, and preempts only there.
func TestHeldToHost(t *testing.T) {
	h := newHarness(t)
	h.must(labelledHost("h1", 2))
	h.must(labelledHost("h2", 2))
	polSet(h, GPU, PriorityBased)
	holdOn(h, "h2", 2, 0)
	a := h.must(&Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 1}}, Host: "h2", Timeout: time.Minute}}).Allocation
	if a.Status != Pending {
		t.Fatalf("held to a full host: %s on %s", a.Status, a.Host)
	}
	if sum := a.WhyNot.Summary; !strings.Contains(sum, "2 not on host h2") {
		t.Fatalf("why-not %q", sum)
	}
	b := h.must(&Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 2}}, Host: "h2", Priority: 50}}).Allocation
	if b.Status != Active || b.Host != "h2" || len(b.Preempted) != 1 {
		t.Fatalf("a higher request held to h2: %s on %s, preempted %v", b.Status, b.Host, b.Preempted)
	}
	if err := Precheck(&Allocate{Request: Request{Claims: []Claim{{Type: GPU, Count: 2}}, Host: "h1", MaxHosts: 2}}); err == nil {
		t.Fatal("a gang held to one host accepted")
	}
}
