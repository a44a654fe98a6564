package fsm

import (
	"fmt"
	"slices"
	"strings"
)

// GangWhyNot is the why-not of a gang: per host and per domain, what it
// could take of the gang's first claim now.
type GangWhyNot struct {
	// Count is the gang's devices of its first claim, over at most
	// MaxHosts hosts, at least MinPerHost each, with Same one label value.
	Count      int    `json:"count"`
	MaxHosts   int    `json:"max_hosts"`
	MinPerHost int    `json:"min_per_host"`
	Same       string `json:"same,omitempty"`
	// HostsAble can each take at least MinPerHost (with the other
	// claims); Best are the hosts that could take the most (at most
	// MaxHosts of them, most first, in the best domain with Same) and
	// BestTotal what they could take together.
	HostsAble int        `json:"hosts_able"`
	Best      []GangHost `json:"best,omitempty"`
	BestTotal int        `json:"best_total"`
	// Domains, with Same: the label's values whose hosts could take the
	// most (at most 8, most first); HostsUnlabelled lack the label.
	Domains         []GangDomain `json:"domains,omitempty"`
	HostsUnlabelled int          `json:"hosts_unlabelled,omitempty"`
}

// GangHost is what one host could take of a gang.
type GangHost struct {
	Host string `json:"host"`
	Take int    `json:"take"`
}

// GangDomain is what one value of a gang's Same label could take: the
// hosts able to take a part, and what its best MaxHosts of them could
// take together.
type GangDomain struct {
	Value     string `json:"value"`
	HostsAble int    `json:"hosts_able"`
	Total     int    `json:"total"`
}

// maxGangDomains bounds the domains a why-not lists.
const maxGangDomains = 8

// explainGang is the why-not of a gang that cannot be placed now: the
// filters' counts per claim (explain), and what each host, and each
// domain, could take of its first claim.
func (s *State) explainGang(a *Allocation) *WhyNot {
	r := &a.Request
	w := s.explain(r)
	gw := &GangWhyNot{Count: r.Claims[0].Count, MaxHosts: r.MaxHosts, MinPerHost: r.minPerHost(), Same: r.Same}
	w.Gang = gw
	fits := s.fitting(r)
	for _, f := range fits {
		if len(f) == 0 {
			w.Summary = summarize(w)
			return w
		}
	}
	g := s.newGangQuery(r, fits, ownOverlay(a))
	pl := definition(s.requestPolicy(r).Policy).place
	byDomain := map[string][]GangHost{}
	gw.HostsUnlabelled = s.eachGangHost(r, func(h *Host, dom string) {
		if n, _ := s.gangTakeMax(g, pl, h, g.ov); n > 0 {
			gw.HostsAble++
			byDomain[dom] = append(byDomain[dom], GangHost{Host: h.ID, Take: n})
		}
	})
	type domain struct {
		GangDomain
		best []GangHost
	}
	var doms []domain
	for _, v := range sortedKeys(byDomain) {
		hosts := byDomain[v]
		slices.SortStableFunc(hosts, func(a, b GangHost) int { return b.Take - a.Take })
		best := hosts[:min(len(hosts), r.MaxHosts)]
		d := domain{GangDomain: GangDomain{Value: v, HostsAble: len(hosts)}, best: best}
		for _, h := range best {
			d.Total += h.Take
		}
		doms = append(doms, d)
	}
	slices.SortStableFunc(doms, func(a, b domain) int { return b.Total - a.Total })
	if len(doms) > 0 {
		gw.Best, gw.BestTotal = slices.Clone(doms[0].best), doms[0].Total
	}
	if r.Same != "" {
		for _, d := range doms[:min(len(doms), maxGangDomains)] {
			gw.Domains = append(gw.Domains, d.GangDomain)
		}
	}
	w.Summary = summarize(w)
	return w
}

// gangSummary says in words what a gang's why-not says.
func gangSummary(w *WhyNot) string {
	g := w.Gang
	var b strings.Builder
	fmt.Fprintf(&b, "no %d hosts can take the gang of %d x %s together (at least %d each", g.MaxHosts, g.Count, w.Claims[0].Type, g.MinPerHost)
	if g.Same != "" {
		fmt.Fprintf(&b, ", one value of host label %s", g.Same)
	}
	fmt.Fprintf(&b, "): %d hosts can take a part", g.HostsAble)
	if len(g.Best) > 0 {
		parts := make([]string, len(g.Best))
		for i, h := range g.Best {
			parts[i] = fmt.Sprintf("%s %d", h.Host, h.Take)
		}
		fmt.Fprintf(&b, "; the best %d take %d of %d (%s)", len(g.Best), g.BestTotal, g.Count, strings.Join(parts, ", "))
	}
	if g.Same != "" {
		if len(g.Domains) > 0 {
			fmt.Fprintf(&b, "; best %s %s", g.Same, g.Domains[0].Value)
		}
		if g.HostsUnlabelled > 0 {
			fmt.Fprintf(&b, "; %d hosts without label %s", g.HostsUnlabelled, g.Same)
		}
	}
	return b.String()
}
