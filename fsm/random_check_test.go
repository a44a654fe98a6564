package fsm_test

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/dmsc/dmsc/fsm"
)

// checkOutcome checks what a good command did and names the outcome.
func checkOutcome(st *step, res fsm.Result, v *publicView, s *fsm.State) (string, error) {
	if st.anyOutcome {
		return "outcome open", nil
	}
	c, ok := st.cmd.(*fsm.Allocate)
	if !ok {
		if res.Err != nil {
			return "", fmt.Errorf("refused: %v", res.Err)
		}
		return "outcome ok", nil
	}
	a := res.Allocation
	if errors.Is(res.Err, fsm.ErrQuotaExceeded) {
		if _, ok := s.QuotaOf(fsm.NamespaceOf(c)); !ok {
			return "", fmt.Errorf("refused for a quota namespace %s does not have: %v", fsm.NamespaceOf(c), res.Err)
		}
		if c.Request.Timeout != 0 || a == nil || a.Status != fsm.Failed || a.WhyNot == nil || a.WhyNot.Quota == "" {
			return "", fmt.Errorf("refusal for quota without a failed allocation and a why-not naming the limit: %+v", a)
		}
		return "outcome over quota", nil
	}
	if res.Err != nil {
		if !errors.Is(res.Err, fsm.ErrNoCapacity) {
			return "", fmt.Errorf("valid request refused: %v", res.Err)
		}
		if c.Request.Timeout != 0 {
			return "", fmt.Errorf("request with a timeout refused instead of queued: %v", res.Err)
		}
		if a == nil || a.Status != fsm.Failed || a.WhyNot == nil {
			return "", fmt.Errorf("refusal for capacity without a failed allocation and a why-not: %+v", a)
		}
		if h := v.fitHost(a); h != "" {
			return "", fmt.Errorf("refused for capacity, but host %s clearly has room: %s", h, res.Err)
		}
		return "outcome failed", nil
	}
	if a == nil {
		return "", fmt.Errorf("accepted without an allocation")
	}
	if c.AllocationID != "" && a.ID != c.AllocationID {
		return "", fmt.Errorf("allocation id %s, asked for %s", a.ID, c.AllocationID)
	}
	outcome := ""
	switch a.Status {
	case fsm.Active:
		outcome = "outcome active"
	case fsm.Pending:
		outcome = "outcome queued"
		if a.WhyNot == nil {
			return "", fmt.Errorf("pending without a why-not")
		}
		if c.Request.Timeout == 0 {
			return "", fmt.Errorf("request without a timeout queued")
		}
	default:
		return "", fmt.Errorf("new allocation is %s", a.Status)
	}
	if len(a.Preempted) > 0 {
		outcome = "outcome preempting"
		pool := c.Request.Claims[0].Pool
		if pool == "" {
			pool = c.Request.Pool
		}
		pc := s.PolicyOf(c.Request.Claims[0].Type, pool)
		gap := pc.PreemptionGap
		if gap <= 0 {
			gap = fsm.DefaultPreemptionGap
		}
		if pc.Policy != fsm.PriorityBased {
			return "", fmt.Errorf("preempted under policy %s", pc.Policy)
		}
		for _, id := range a.Preempted {
			victim, ok := s.Allocation(id)
			if !ok {
				continue // already left the history
			}
			if victim.Status != fsm.Preempted || victim.PreemptedBy != a.ID {
				return "", fmt.Errorf("victim %s is %s, preempted by %q", id, victim.Status, victim.PreemptedBy)
			}
			if victim.Request.Priority > c.Request.Priority-gap {
				return "", fmt.Errorf("victim %s has priority %d, request %d, gap %d", id, victim.Request.Priority, c.Request.Priority, gap)
			}
		}
	}
	return outcome, nil
}

// checkPreferred checks that a request placed at once took, for its first
// claim, devices with every preferred label when it surely fitted on such
// devices before the command (prev), the command changing nothing else.
func checkPreferred(a *fsm.Allocation, prev, v *publicView) error {
	r := &a.Request
	if a.Status != fsm.Active || len(r.Labels.Preferred) == 0 || len(a.Preempted) > 0 || r.IsGang() || !v.onlyNew(prev, a) {
		return nil
	}
	preferred := func(d *fsm.Device) bool {
		for k, w := range r.Labels.Preferred {
			if d.Labels[k] != w {
				return false
			}
		}
		return true
	}
	for _, as := range a.Devices {
		if d := v.devByID[as.DeviceID]; as.Claim == 0 && !preferred(d) {
			if h := prev.fitHostWhere(a, preferred); h != "" {
				return fmt.Errorf("placed on %s without the preferred labels %v, but host %s had room on devices with them", d.ID, r.Labels.Preferred, h)
			}
		}
	}
	return nil
}

// onlyNew reports whether the live allocations of v are those of prev in
// the same status, and a.
func (v *publicView) onlyNew(prev *publicView, a *fsm.Allocation) bool {
	if len(v.live) != len(prev.live)+1 {
		return false
	}
	for _, b := range v.live {
		if p := prev.liveByID[b.ID]; b.ID != a.ID && (p == nil || p.Status != b.Status) {
			return false
		}
	}
	return true
}

// publicView is what the public read API shows of a state. Its checks do
// not rely on the code under test beyond those accessors.
type publicView struct {
	now      int64
	hosts    []fsm.Host
	devs     []fsm.Device
	live     []*fsm.Allocation
	queue    []*fsm.Allocation
	hostByID map[string]*fsm.Host
	devByID  map[string]*fsm.Device
	liveByID map[string]*fsm.Allocation
	// quotaNS are the namespaces with a quota, borrowNS those that may
	// borrow.
	quotaNS, borrowNS map[string]bool
	// reserved is the waiting gang that holds each reserved host.
	reserved map[string]*fsm.Allocation
}

func observe(s *fsm.State) *publicView {
	v := &publicView{now: s.Now().UnixNano(), hosts: s.Hosts(), devs: s.Devices(), live: s.Live(), queue: s.Queue(),
		hostByID: map[string]*fsm.Host{}, devByID: map[string]*fsm.Device{}, liveByID: map[string]*fsm.Allocation{}, quotaNS: map[string]bool{}, borrowNS: map[string]bool{}}
	for _, q := range s.Quotas() {
		v.quotaNS[q.Namespace] = true
		v.borrowNS[q.Namespace] = q.Borrow
	}
	for i := range v.hosts {
		v.hostByID[v.hosts[i].ID] = &v.hosts[i]
	}
	for i := range v.devs {
		v.devByID[v.devs[i].ID] = &v.devs[i]
	}
	v.reserved = map[string]*fsm.Allocation{}
	for _, a := range v.live {
		v.liveByID[a.ID] = a
		for _, h := range a.Reserved {
			v.reserved[h] = a
		}
	}
	return v
}

// closedTo reports whether device d is reserved for a gang other than
// own: closed to the gang's own, to gangs and to the requests behind it in
// the queue, open to a one-host request ahead of it (a higher priority,
// or the same and earlier).
func (v *publicView) closedTo(d *fsm.Device, own *fsm.Allocation) bool {
	g := v.reserved[d.Host]
	if g == nil || g.ID == own.ID || g.Request.Claims[0].Type != d.Type {
		return false
	}
	return own.Request.IsGang() || !comesBefore(own, g)
}

// comesBefore reports whether a comes before b in the queue: a higher
// priority, or the same and earlier.
func comesBefore(a, b *fsm.Allocation) bool {
	return a.Request.Priority > b.Request.Priority || a.Request.Priority == b.Request.Priority && a.Seq < b.Seq
}

// transitions names what happened to the allocations that were live in prev.
func (v *publicView) transitions(prev *publicView, s *fsm.State) []string {
	var out []string
	for _, a := range prev.live {
		now, ok := v.liveByID[a.ID]
		if ok && a.Preempting == nil && now.Preempting != nil {
			out = append(out, "reclaim began")
		}
		if ok && a.Preempting != nil && now.Preempting == nil {
			out = append(out, "reclaim spared")
		}
		if ended, found := s.Allocation(a.ID); !ok && found && strings.HasPrefix(ended.Reason, "reclaimed by") {
			out = append(out, "reclaimed")
		}
		if ok && a.Status == fsm.Pending && len(a.Reserved) == 0 && len(now.Reserved) > 0 {
			out = append(out, "gang reserved")
		}
		if ok && a.Status == fsm.Pending && now.Status == fsm.Active && len(now.Hosts) > 1 {
			out = append(out, "gang served from queue")
		}
		switch {
		case ok && a.Status == fsm.Pending && now.Status == fsm.Active && len(now.Preempted) > 0:
			out = append(out, "served from queue by preemption")
		case ok && a.Status == fsm.Pending && now.Status == fsm.Active:
			out = append(out, "served from queue")
		case !ok:
			if ended, found := s.Allocation(a.ID); found {
				out = append(out, "ended "+string(ended.Status))
			}
		}
	}
	for _, a := range v.live {
		if _, was := prev.liveByID[a.ID]; !was && a.Status == fsm.Active && len(a.Hosts) > 1 {
			out = append(out, "gang across hosts")
		}
	}
	return out
}

// tolerance absorbs float rounding in sums of amounts.
const tolerance = 1e-6

func resVec(r fsm.Resources) [4]float64 {
	return [4]float64{r.MemoryGB, r.ComputeUnits, r.StorageGB, r.BandwidthGbps}
}

// check verifies the state as the read API shows it. afterTick: a tick was
// just applied, so nothing may be overdue.
func (v *publicView) check(afterTick bool) error {
	for _, h := range v.hosts {
		if !sort.StringsAreSorted(h.Devices) {
			return fmt.Errorf("host %s: devices not sorted", h.ID)
		}
		for _, id := range h.Devices {
			if d := v.devByID[id]; d == nil || d.Host != h.ID {
				return fmt.Errorf("host %s lists device %s that is not its own", h.ID, id)
			}
		}
	}
	used := map[string][4]float64{}
	for _, d := range v.devs {
		h := v.hostByID[d.Host]
		if h == nil {
			return fmt.Errorf("device %s on unknown host %s", d.ID, d.Host)
		}
		if i := sort.SearchStrings(h.Devices, d.ID); i == len(h.Devices) || h.Devices[i] != d.ID {
			return fmt.Errorf("device %s not listed by its host %s", d.ID, d.Host)
		}
		if (d.Status == fsm.Offline) != !h.Up {
			return fmt.Errorf("device %s is %s on a host up=%t", d.ID, d.Status, h.Up)
		}
		caps, u := resVec(d.Capabilities.Resources), resVec(d.Used)
		for k := range caps {
			if math.IsNaN(u[k]) || u[k] < 0 || u[k] > caps[k]+tolerance {
				return fmt.Errorf("device %s: used %+v, capacity %+v", d.ID, d.Used, d.Capabilities.Resources)
			}
		}
		if !d.Shareable && len(d.Allocations) > 1 {
			return fmt.Errorf("exclusive device %s has %d allocations", d.ID, len(d.Allocations))
		}
		if len(d.Allocations) > 0 && d.Status == fsm.Offline {
			return fmt.Errorf("offline device %s has allocations", d.ID)
		}
		for _, id := range d.Allocations {
			if a := v.liveByID[id]; a == nil || a.Status != fsm.Active {
				return fmt.Errorf("device %s lists allocation %s that is not active", d.ID, id)
			}
		}
	}
	for _, a := range v.live {
		switch a.Status {
		case fsm.Pending:
			if len(a.Devices) > 0 || a.Host != "" {
				return fmt.Errorf("pending allocation %s holds devices", a.ID)
			}
			if afterTick && a.Deadline <= v.now {
				return fmt.Errorf("pending allocation %s is past its deadline after a tick", a.ID)
			}
			// A request past its deadline is not placed any more; the
			// next tick times it out. One of a namespace with a quota may
			// wait for the quota (checkQuotas checks what is placed).
			if a.Deadline > v.now && !v.quotaNS[a.Namespace] {
				if h := v.fitHost(a); h != "" {
					return fmt.Errorf("pending allocation %s (%+v) clearly fits on host %s now", a.ID, a.Request, h)
				}
			}
			continue
		case fsm.Active:
		default:
			return fmt.Errorf("live allocation %s is %s", a.ID, a.Status)
		}
		if afterTick && a.LeaseExpiresAt != 0 && a.LeaseExpiresAt <= v.now {
			return fmt.Errorf("active allocation %s is past its lease after a tick", a.ID)
		}
		hosts := []string{a.Host}
		if a.Request.IsGang() {
			hosts = a.Hosts
			if len(hosts) == 0 || len(hosts) > a.Request.MaxHosts || hosts[0] != a.Host {
				return fmt.Errorf("gang %s on hosts %v (host %s), at most %d", a.ID, hosts, a.Host, a.Request.MaxHosts)
			}
		}
		for _, id := range hosts {
			h := v.hostByID[id]
			if h == nil || !h.Up {
				return fmt.Errorf("active allocation %s on missing or down host %q", a.ID, id)
			}
			if dr := h.Drain; dr != nil {
				if a.AllocatedAt > dr.Since {
					return fmt.Errorf("allocation %s placed at %d on host %s, drained since %d", a.ID, a.AllocatedAt, h.ID, dr.Since)
				}
				if dr.Ended || (afterTick && dr.Deadline != 0 && dr.Deadline <= v.now) {
					return fmt.Errorf("allocation %s still on host %s past its drain deadline %d (now %d)", a.ID, h.ID, dr.Deadline, v.now)
				}
			}
		}
		perClaim := make([]int, len(a.Request.Claims))
		inClaim := map[string]bool{}
		for _, as := range a.Devices {
			d := v.devByID[as.DeviceID]
			if d == nil || !slices.Contains(hosts, d.Host) {
				return fmt.Errorf("allocation %s holds device %s, missing or not on its hosts %v", a.ID, as.DeviceID, hosts)
			}
			if i := sort.SearchStrings(d.Allocations, a.ID); i == len(d.Allocations) || d.Allocations[i] != a.ID {
				return fmt.Errorf("allocation %s holds device %s, which does not list it", a.ID, d.ID)
			}
			if as.Claim < 0 || as.Claim >= len(perClaim) {
				return fmt.Errorf("allocation %s: assignment to claim %d", a.ID, as.Claim)
			}
			perClaim[as.Claim]++
			key := fmt.Sprintf("%d/%s", as.Claim, d.ID)
			if inClaim[key] {
				return fmt.Errorf("allocation %s takes device %s twice for claim %d", a.ID, d.ID, as.Claim)
			}
			inClaim[key] = true
			cl := &a.Request.Claims[as.Claim]
			if why := staticMismatch(d, &a.Request, as.Claim); why != "" {
				return fmt.Errorf("allocation %s holds device %s that does not meet claim %d: %s", a.ID, d.ID, as.Claim, why)
			}
			whole := !d.Shareable || cl.Amount.IsZero()
			want := cl.Amount
			if whole {
				want = d.Capabilities.Resources
				if len(d.Allocations) != 1 {
					return fmt.Errorf("device %s taken whole by %s has %d allocations", d.ID, a.ID, len(d.Allocations))
				}
			}
			if as.Amount != want {
				return fmt.Errorf("allocation %s takes %+v of device %s, want %+v", a.ID, as.Amount, d.ID, want)
			}
			u := used[d.ID]
			for k, x := range resVec(as.Amount) {
				u[k] += x
			}
			used[d.ID] = u
		}
		for i, n := range perClaim {
			want := a.Request.Claims[i].Count
			if i > 0 {
				want *= len(hosts) // a gang's other claims, on each host
			}
			if n != want {
				return fmt.Errorf("allocation %s: claim %d got %d devices, asked %d", a.ID, i, n, want)
			}
		}
	}
	for _, d := range v.devs {
		u, du := used[d.ID], resVec(d.Used)
		for k := range u {
			if math.Abs(u[k]-du[k]) > tolerance {
				return fmt.Errorf("device %s: used %+v, its allocations take %v", d.ID, d.Used, u)
			}
		}
	}
	pending := 0
	for _, a := range v.live {
		if a.Status == fsm.Pending {
			pending++
		}
	}
	if len(v.queue) != pending {
		return fmt.Errorf("queue holds %d, %d allocations pending", len(v.queue), pending)
	}
	for i, a := range v.queue {
		if l := v.liveByID[a.ID]; l == nil || l.Status != fsm.Pending {
			return fmt.Errorf("queue holds %s, which is not pending", a.ID)
		}
		if i > 0 {
			p := v.queue[i-1]
			if p.Request.Priority < a.Request.Priority || (p.Request.Priority == a.Request.Priority && p.Seq > a.Seq) {
				return fmt.Errorf("queue serves %s (priority %d) before %s (priority %d)", p.ID, p.Request.Priority, a.ID, a.Request.Priority)
			}
		}
	}
	return nil
}

// staticMismatch says why device d does not meet claim i of r whatever its
// use, or "".
func staticMismatch(d *fsm.Device, r *fsm.Request, i int) string {
	cl := &r.Claims[i]
	if d.Type != cl.Type {
		return "type"
	}
	pool := cl.Pool
	if pool == "" {
		pool = r.Pool
	}
	if pool != "" && d.Pool != pool {
		return "pool"
	}
	have, want := resVec(d.Capabilities.Resources), resVec(cl.Capabilities.Resources)
	for k := range have {
		if have[k] < want[k] {
			return "capability"
		}
	}
	for k, w := range cl.Capabilities.Custom {
		h, ok := d.Capabilities.Custom[k]
		if !ok || !anyOf(h, w) {
			return "custom " + k
		}
	}
	for k, w := range r.Labels.Required {
		if d.Labels[k] != w {
			return "required label " + k
		}
	}
	for k, w := range r.Labels.Forbidden {
		if h, ok := d.Labels[k]; ok && (w == "*" || h == w) {
			return "forbidden label " + k
		}
	}
	if d.Shareable && !cl.Amount.IsZero() {
		a := resVec(cl.Amount)
		for k := range have {
			if a[k] > have[k] {
				return "amount larger than the device"
			}
		}
	}
	return ""
}

func anyOf(have, want string) bool {
	for _, alt := range strings.Split(want, "|") {
		if alt == have {
			return true
		}
	}
	return false
}

// onGrid reports whether x is a multiple of 1/4, where sums are exact.
func onGrid(x float64) bool { return x*4 == math.Trunc(x*4) }

// clearlyFree reports whether device d can surely take claim i of r now.
func clearlyFree(d *fsm.Device, r *fsm.Request, i int) bool {
	if d.Status != fsm.Available || staticMismatch(d, r, i) != "" {
		return false
	}
	cl := &r.Claims[i]
	if !d.Shareable || cl.Amount.IsZero() {
		return len(d.Allocations) == 0
	}
	caps, used, amt := resVec(d.Capabilities.Resources), resVec(d.Used), resVec(cl.Amount)
	for k := range caps {
		slack := caps[k] - used[k] - amt[k]
		exact := onGrid(caps[k]) && onGrid(used[k]) && onGrid(amt[k])
		if slack < 0 || (!exact && slack < tolerance) {
			return false
		}
	}
	return true
}

// fitHost returns a host on which allocation own's request surely fits
// now, or "". It judges only requests whose claims are of different types
// (claims of one type compete for devices, which this oracle does not
// model). A claim that requires NVLink needs that many of the clearly
// free devices linked by NVLink pairwise, searched for by brute force.
func (v *publicView) fitHost(own *fsm.Allocation) string { return v.fitHostWhere(own, nil) }

// fitHostWhere is fitHost with the first claim's devices limited to those
// keep accepts (nil: all).
func (v *publicView) fitHostWhere(own *fsm.Allocation, keep func(*fsm.Device) bool) string {
	r := &own.Request
	types := map[fsm.DeviceType]bool{}
	for _, c := range r.Claims {
		if types[c.Type] {
			return ""
		}
		types[c.Type] = true
	}
	if r.IsGang() {
		return v.fitGang(own)
	}
	for _, h := range v.hosts {
		if !h.Up || h.Drain != nil || r.Host != "" && h.ID != r.Host {
			continue
		}
		ok := true
		for i, cl := range r.Claims {
			var free []*fsm.Device
			for _, id := range h.Devices {
				if d := v.devByID[id]; clearlyFree(d, r, i) && !v.closedTo(d, own) && (i > 0 || keep == nil || keep(d)) {
					free = append(free, d)
				}
			}
			if len(free) < cl.Count || cl.Topology == fsm.TopologyNVLink && !nvlinkClique(free, nil, cl.Count) {
				ok = false
				break
			}
		}
		if ok {
			return h.ID
		}
	}
	return ""
}

// nvlinkClique reports whether n of devs, with those of set, are linked
// by NVLink pairwise (a link either device reports).
func nvlinkClique(devs, set []*fsm.Device, n int) bool {
	if len(set) == n {
		return true
	}
	nv := func(a, b *fsm.Device) bool {
		return a.Topology != nil && strings.HasPrefix(a.Topology.Links[b.ID], "NV") ||
			b.Topology != nil && strings.HasPrefix(b.Topology.Links[a.ID], "NV")
	}
	for i, d := range devs {
		if !slices.ContainsFunc(set, func(s *fsm.Device) bool { return !nv(s, d) }) &&
			nvlinkClique(devs[i+1:], append(set, d), n) {
			return true
		}
	}
	return false
}

// fitGang returns the hosts, joined, on which own, a one-claim gang,
// surely fits now, or "": in one domain, j ≤ MaxHosts hosts with the most
// clearly free devices (at least MinPerHost each; for an NVLink claim,
// the most linked so pairwise) have its count together, and j times
// MinPerHost is at most its count.
func (v *publicView) fitGang(own *fsm.Allocation) string {
	r := &own.Request
	if len(r.Claims) != 1 {
		return ""
	}
	byDomain := map[string][]int{}
	names := map[string][]string{}
	for _, h := range v.hosts {
		if !h.Up || h.Drain != nil {
			continue
		}
		dom, ok := h.Labels[r.Same]
		if r.Same != "" && !ok {
			continue
		}
		var free []*fsm.Device
		for _, id := range h.Devices {
			if d := v.devByID[id]; clearlyFree(d, r, 0) && !v.closedTo(d, own) {
				free = append(free, d)
			}
		}
		n := len(free)
		if r.Claims[0].Topology == fsm.TopologyNVLink {
			// A part is NVLink-linked pairwise: at most the host's
			// largest such set (any part of it is one too).
			for n > 1 && !nvlinkClique(free, nil, n) {
				n--
			}
		}
		if n >= max(r.MinPerHost, 1) {
			byDomain[dom] = append(byDomain[dom], n)
			names[dom] = append(names[dom], h.ID)
		}
	}
	for dom, ns := range byDomain {
		sorted := slices.Clone(ns)
		slices.Sort(sorted)
		slices.Reverse(sorted)
		sum := 0
		for j, n := range sorted[:min(len(sorted), r.MaxHosts)] {
			sum += n
			if sum >= r.Claims[0].Count && (j+1)*max(r.MinPerHost, 1) <= r.Claims[0].Count {
				return strings.Join(names[dom], ",")
			}
		}
	}
	return ""
}

// checkQuotas: every allocation this command placed (new, or served from
// the queue) left its namespace within each limit of its quota that its
// devices fall under, counted from the public view; a namespace that
// borrows may be past a max count, not past an amount.
func (v *publicView) checkQuotas(prev *publicView, s *fsm.State) error {
	for _, a := range v.live {
		if was, ok := prev.liveByID[a.ID]; a.Status != fsm.Active || (ok && was.Status == fsm.Active) {
			continue
		}
		q, ok := s.QuotaOf(a.Namespace)
		if !ok {
			continue
		}
		for _, l := range q.Limits {
			under := func(id string) bool {
				d := v.devByID[id]
				return d != nil && d.Type == l.DeviceType && (l.Pool == "" || d.Pool == l.Pool)
			}
			touched := false
			for _, as := range a.Devices {
				touched = touched || under(as.DeviceID)
			}
			if !touched {
				continue
			}
			count, amount := 0, [4]float64{}
			for _, b := range v.live {
				if b.Status != fsm.Active || b.Namespace != a.Namespace {
					continue
				}
				for _, as := range b.Devices {
					if under(as.DeviceID) {
						count++
						for k, x := range resVec(as.Amount) {
							amount[k] += x
						}
					}
				}
			}
			// Past a count by borrowing is checked by checkReclaims.
			if l.MaxCount != nil && count > *l.MaxCount && !q.Borrow {
				return fmt.Errorf("%s placed %s: %s holds %d %s devices (pool %q), quota %d", a.Namespace, a.ID, a.Namespace, count, l.DeviceType, l.Pool, *l.MaxCount)
			}
			for k, m := range resVec(l.MaxAmount) {
				if m > 0 && amount[k] > m+tolerance {
					return fmt.Errorf("%s placed %s: %s holds %g of amount %d of %s (pool %q), quota %g", a.Namespace, a.ID, a.Namespace, amount[k], k, l.DeviceType, l.Pool, m)
				}
			}
		}
	}
	return nil
}

// checkReclaims: an allocation in its reclaim grace is active, of a
// namespace that borrows, and reclaimed by a waiting request of another
// namespace; after a tick, none is past its grace.
func (v *publicView) checkReclaims(afterTick bool) error {
	for _, a := range v.live {
		p := a.Preempting
		if p == nil {
			continue
		}
		r := v.liveByID[p.By]
		switch {
		case a.Status != fsm.Active:
			return fmt.Errorf("allocation %s is %s and preempting", a.ID, a.Status)
		case !v.borrowNS[a.Namespace]:
			return fmt.Errorf("allocation %s of %s is reclaimed, but its namespace does not borrow", a.ID, a.Namespace)
		case r == nil || r.Status != fsm.Pending || r.Namespace == a.Namespace:
			return fmt.Errorf("allocation %s is reclaimed by %s, which is not a waiting request of another namespace", a.ID, p.By)
		case afterTick && p.Deadline <= v.now:
			return fmt.Errorf("allocation %s kept its borrowed devices past its grace (%d, now %d)", a.ID, p.Deadline, v.now)
		}
	}
	return nil
}
