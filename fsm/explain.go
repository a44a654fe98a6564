package fsm

import (
	"fmt"
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
	HostsRejected int    `json:"hosts_rejected,omitempty"`
	Summary       string `json:"summary"`
}

// ClaimWhyNot is the filter breakdown for one claim.
type ClaimWhyNot struct {
	Claim int        `json:"claim"`
	Type  DeviceType `json:"type"`
	Count int        `json:"count"`
	// Removed says how many devices each filter removed, in filter order.
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

// filterRank orders reasons as the filter chain runs.
func filterRank(r string) int {
	for i, p := range []string{"type", "pool", "host down", "status", "capability", "custom", "required label", "forbidden label", "amount larger", "in use"} {
		if strings.HasPrefix(r, p) {
			return i
		}
	}
	return 99
}

// deviceReason says why device d cannot serve claim i now, or "". static
// memoizes the static filters' verdict per class for this claim.
func (s *State) deviceReason(d *Device, r *Request, i int, static map[*class]string) string {
	cl := &r.Claims[i]
	why, ok := static[d.cls]
	if !ok {
		why = staticFit(d.cls, cl, r.claimPool(i), &r.Labels)
		static[d.cls] = why
	}
	if why != "" {
		return why
	}
	if h := s.hosts[d.Host]; h == nil || !h.Up {
		return "host down (device offline)"
	}
	if d.Status != Available {
		return "status " + string(d.Status)
	}
	amt, whole := take(d.cls, cl)
	if !s.fits(d, amt, whole, nil) {
		return "in use (not enough free capacity)"
	}
	return ""
}

// explain computes the why-not of a request that cannot be placed now.
// It scans every device once; it runs only on refusals.
func (s *State) explain(r *Request) *WhyNot {
	w := &WhyNot{Devices: len(s.devices), Hosts: len(s.hosts)}
	perHost := make([]map[string]int, len(r.Claims))
	for i := range r.Claims {
		counts := map[string]int{}
		perHost[i] = map[string]int{}
		fitting := 0
		static := map[*class]string{}
		for _, d := range s.devices { // counting only: order does not matter
			if why := s.deviceReason(d, r, i, static); why != "" {
				counts[why]++
				continue
			}
			fitting++
			perHost[i][d.Host]++
		}
		cw := ClaimWhyNot{Claim: i, Type: r.Claims[i].Type, Count: r.Claims[i].Count, Fitting: fitting, HostsWithSome: len(perHost[i])}
		for _, n := range perHost[i] {
			if n >= r.Claims[i].Count {
				cw.HostsWithEnough++
			}
		}
		for _, k := range sortedKeys(counts) {
			cw.Removed = append(cw.Removed, Reason{Reason: k, Count: counts[k]})
		}
		sort.SliceStable(cw.Removed, func(a, b int) bool {
			return filterRank(cw.Removed[a].Reason) < filterRank(cw.Removed[b].Reason)
		})
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
	return w
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
		if c.Fitting > 0 && c.HostsWithEnough == 0 {
			p += fmt.Sprintf("; no host has %d fitting devices", c.Count)
		}
		parts = append(parts, p)
	}
	s := "no host can take the request: " + strings.Join(parts, "; ")
	if w.HostsRejected > 0 {
		s += fmt.Sprintf("; %d hosts fit each claim alone but not all together", w.HostsRejected)
	}
	return s
}
