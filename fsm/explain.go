package fsm

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// WhyNot explains a refusal: how many devices each filter removed for each
// claim, and why the hosts that had some fitting devices were not enough.
type WhyNot struct {
	Devices int           `json:"devices"`
	Hosts   int           `json:"hosts"`
	Claims  []ClaimWhyNot `json:"claims"`
	// HostsRejected counts hosts that had fitting devices for every claim
	// one by one, but not for all claims together.
	HostsRejected int `json:"hosts_rejected,omitempty"`
	// Quota, when set, is the limit of the namespace's quota the request
	// would pass (then Summary says the same): devices may fit, but the
	// namespace may not take them.
	Quota string `json:"quota,omitempty"`
	// Gang, for a gang, says what each host and domain could take of it
	// (gang_why.go).
	Gang    *GangWhyNot `json:"gang,omitempty"`
	Summary string      `json:"summary"`
}

// ClaimWhyNot is the filter breakdown for one claim.
type ClaimWhyNot struct {
	Claim int        `json:"claim"`
	Type  DeviceType `json:"type"`
	Count int        `json:"count"`
	// Removed says how many devices each filter removed, in the order
	// the filters run (filter.go), alike reasons of one filter by name.
	Removed []Reason `json:"removed"`
	// Fitting devices passed every filter.
	Fitting int `json:"fitting"`
	// HostsWithSome have at least one fitting device; HostsWithEnough have
	// at least Count.
	HostsWithSome   int `json:"hosts_with_some"`
	HostsWithEnough int `json:"hosts_with_enough"`
}

// Reason is one filter's verdict.
type Reason struct {
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}

// drop is what removed a device: the index of the filter in the chain
// (static filters first, then the device filters) and its reason.
type drop struct {
	filter int
	reason string
}

// explain computes the why-not of a request that cannot be placed now: it
// runs the filter chain over every device, claim by claim, and counts
// what each filter dropped. It runs only on refusals.
func (s *State) explain(r *Request) *WhyNot {
	w := &WhyNot{Devices: len(s.devices), Hosts: len(s.hosts)}
	perHost := make([]map[string]int, len(r.Claims))
	var unlinked []string // of claims that require NVLink
	for i := range r.Claims {
		f := claimFilter{cl: &r.Claims[i], pool: r.claimPool(i), sel: &r.Labels}
		drops := map[drop]int{}
		static := map[*class]drop{}
		perHost[i] = map[string]int{}
		fitting := 0
		for _, d := range s.devices { // counting only: order does not matter
			dr, ok := static[d.cls]
			if !ok {
				dr.filter, dr.reason = staticFit(d.cls, &f)
				static[d.cls] = dr
			}
			if r.Host != "" && d.Host != r.Host && dr.filter < 0 {
				dr = drop{filter: len(staticFilters), reason: "not on host " + r.Host}
			}
			for j := 0; dr.filter < 0 && j < len(deviceFilters); j++ {
				if why := deviceFilters[j](s, d, f.cl); why != "" {
					dr = drop{filter: len(staticFilters) + j, reason: why}
				}
			}
			if dr.filter >= 0 {
				drops[dr]++
				continue
			}
			fitting++
			perHost[i][d.Host]++
		}
		cw := ClaimWhyNot{Claim: i, Type: f.cl.Type, Count: f.cl.Count, Fitting: fitting, HostsWithSome: len(perHost[i])}
		if f.cl.Topology == TopologyNVLink && f.cl.Count > 1 {
			if n := s.hostsWithoutLinks(f.cl, i, r, perHost[i]); n > 0 {
				unlinked = append(unlinked, fmt.Sprintf("claim %d needs %d devices linked by NVLink: %d hosts have that many fitting, not linked so", i, f.cl.Count, n))
			}
		}
		for _, n := range perHost[i] {
			if n >= f.cl.Count {
				cw.HostsWithEnough++
			}
		}
		order := make([]drop, 0, len(drops))
		for dr := range drops {
			order = append(order, dr)
		}
		sort.Slice(order, func(a, b int) bool {
			if order[a].filter != order[b].filter {
				return order[a].filter < order[b].filter
			}
			return order[a].reason < order[b].reason
		})
		for _, dr := range order {
			cw.Removed = append(cw.Removed, Reason{Reason: dr.reason, Count: drops[dr]})
		}
		w.Claims = append(w.Claims, cw)
	}
	// Hosts with enough devices for every claim on its own.
	for h, n := range perHost[0] {
		ok := n >= r.Claims[0].Count
		for i := 1; ok && i < len(r.Claims); i++ {
			ok = perHost[i][h] >= r.Claims[i].Count
		}
		if ok {
			w.HostsRejected++
		}
	}
	w.Summary = summarize(w)
	for _, u := range unlinked {
		w.Summary += "; " + u
	}
	return w
}

// hostsWithoutLinks counts the hosts with enough devices fitting claim i
// (perHost) among which no claim's count are linked pairwise by NVLink.
func (s *State) hostsWithoutLinks(cl *Claim, i int, r *Request, perHost map[string]int) int {
	f := claimFilter{cl: cl, pool: r.claimPool(i), sel: &r.Labels}
	n := 0
	for _, id := range sortedKeys(perHost) {
		if perHost[id] < cl.Count {
			continue
		}
		var cands []rankedDevice
		for _, d := range s.hostTypeDevices(s.hosts[id], cl.Type) {
			if k, _ := staticFit(d.cls, &f); k >= 0 {
				continue
			}
			if amt, whole := take(d.cls, cl); s.fits(d, amt, whole, nil) {
				cands = append(cands, rankedDevice{d: d})
			}
		}
		slices.SortFunc(cands, rankedLess)
		if linked(cands, cl.Count, true) == nil {
			n++
		}
	}
	return n
}

func summarize(w *WhyNot) string {
	var parts []string
	for _, c := range w.Claims {
		var rm []string
		for _, r := range c.Removed {
			rm = append(rm, fmt.Sprintf("%d %s", r.Count, r.Reason))
		}
		p := fmt.Sprintf("claim %d (%d x %s): %d of %d devices fit", c.Claim, c.Count, c.Type, c.Fitting, w.Devices)
		if len(rm) > 0 {
			p += " (removed: " + strings.Join(rm, ", ") + ")"
		}
		if c.Fitting > 0 && c.HostsWithEnough == 0 && (w.Gang == nil || c.Claim > 0) {
			p += fmt.Sprintf("; no host has %d fitting devices", c.Count)
		}
		parts = append(parts, p)
	}
	s := "no host can take the request: " + strings.Join(parts, "; ")
	if w.Gang != nil {
		s = gangSummary(w) + "; " + strings.Join(parts, "; ")
	}
	if w.HostsRejected > 0 {
		s += fmt.Sprintf("; %d hosts fit each claim alone but not all together", w.HostsRejected)
	}
	return s
}
