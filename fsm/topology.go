package fsm

import (
	"slices"
	"strconv"
	"strings"
)

// Topology is where a device sits on its host: its NUMA node and its
// links to the host's other devices, as `nvidia-smi topo -m` reports
// them for GPUs (or as an inventory file says). It is the device's alone:
// it does not split the classes of alike devices, and only the choice of
// devices on a host reads it (takeOnHost):
//
//   - a claim of several GPUs takes the devices with the best links
//     among those that fit: all pairs over NVLink if it can, else all
//     under one PCIe switch (PIX), then several switches (PXB), one host
//     bridge (PHB), one NUMA node (NODE), and across NUMA nodes (SYS)
//     last; the policy's device order breaks ties. A claim with
//     Topology "nvlink" takes only devices linked by NVLink pairwise, or
//     none on that host;
//   - a claim of CPU or Memory devices after a claim of GPUs prefers the
//     devices on the NUMA nodes of the GPUs taken.
type Topology struct {
	// NUMA is the device's NUMA node, when known.
	NUMA *int `json:"numa,omitempty"`
	// Links are the device's links to other devices of its host, by
	// their IDs: "NV<n>" (n bonded NVLinks), "PIX", "PXB", "PHB",
	// "NODE" or "SYS".
	Links map[string]string `json:"links,omitempty"`
}

// Limits on a topology.
const (
	MaxNUMANode = 1023
	MaxLinks    = MaxDevicesPerHost
)

// TopologyNVLink is the claim topology that requires NVLink between every
// pair of the claim's devices.
const TopologyNVLink = "nvlink"

// linkLevel ranks a link, best first.
type linkLevel int8

const (
	linkNVLink linkLevel = iota
	linkPIX
	linkPXB
	linkPHB
	linkNode
	linkSys
	linkUnknown
)

func (l linkLevel) String() string {
	if l >= linkNVLink && l < linkUnknown {
		return [...]string{"NVLink", "PIX", "PXB", "PHB", "NODE", "SYS"}[l]
	}
	return "unknown"
}

// levelOf is the level of a link as Topology.Links spells it.
func levelOf(s string) (linkLevel, bool) {
	switch s {
	case "PIX":
		return linkPIX, true
	case "PXB":
		return linkPXB, true
	case "PHB":
		return linkPHB, true
	case "NODE":
		return linkNode, true
	case "SYS":
		return linkSys, true
	}
	if n, ok := strings.CutPrefix(s, "NV"); ok {
		if k, err := strconv.Atoi(n); err == nil && k >= 1 && k <= 99 && strconv.Itoa(k) == n {
			return linkNVLink, true
		}
	}
	return linkUnknown, false
}

// validTopology checks a device's topology; "" when it is fine.
func validTopology(t *Topology) string {
	if t == nil {
		return ""
	}
	if t.NUMA != nil && (*t.NUMA < 0 || *t.NUMA > MaxNUMANode) {
		return "numa node out of 0.." + strconv.Itoa(MaxNUMANode)
	}
	if len(t.Links) > MaxLinks {
		return "more than " + strconv.Itoa(MaxLinks) + " links"
	}
	for _, peer := range sortedKeys(t.Links) {
		if !ValidID(peer) {
			return "link to " + strconv.Quote(peer) + ", not a device id"
		}
		if _, ok := levelOf(t.Links[peer]); !ok {
			return "link " + strconv.Quote(t.Links[peer]) + " to " + peer + " is not NV<n>, PIX, PXB, PHB, NODE or SYS"
		}
	}
	return ""
}

// validClaimTopology checks a claim's Topology.
func validClaimTopology(s string) bool { return s == "" || s == TopologyNVLink }

func topologyEqual(a, b *Topology) bool {
	if a == nil || b == nil {
		return a == b
	}
	if (a.NUMA == nil) != (b.NUMA == nil) || a.NUMA != nil && *a.NUMA != *b.NUMA {
		return false
	}
	return mapEqual(a.Links, b.Links)
}

// link is the level of the link between devices a and b: what either
// says of the other (the better when both do), unknown when neither does.
func link(a, b *Device) linkLevel {
	best := linkUnknown
	if a.Topology != nil {
		if l, ok := levelOf(a.Topology.Links[b.ID]); ok {
			best = l
		}
	}
	if b.Topology != nil {
		if l, ok := levelOf(b.Topology.Links[a.ID]); ok && l < best {
			best = l
		}
	}
	return best
}

// linked picks n of cands (in the policy's device order) with the best
// links between them: the best level at which some n of them reach each
// other pairwise, and at that level the first such set in the device
// order (the one whose first device comes first, then its second, and so
// on). nvlinkOnly keeps to NVLink. It returns nil when no n reach each
// other at an allowed level, and the first n when the candidates carry
// no links.
//
// The search of each level is exact within linkChecks tests of a pair
// of devices (n² when more: enough for n devices all linked alike), far
// more than hosts of 8 or 16 GPUs ever need. On a host whose links tangle
// beyond that, a level whose search runs out counts as reached by no set,
// so that every replica stops at the same point.
func linked(cands []rankedDevice, n int, nvlinkOnly bool) []rankedDevice {
	if n < 2 || len(cands) < n {
		return cands[:min(n, len(cands))]
	}
	if !slices.ContainsFunc(cands, func(c rankedDevice) bool { return c.d.Topology != nil && len(c.d.Topology.Links) > 0 }) {
		if nvlinkOnly {
			return nil
		}
		return cands[:n]
	}
	if pick := linkedSet(linkSearch{cands: cands, n: n}, nvlinkOnly); pick != nil || nvlinkOnly {
		return pick
	}
	return cands[:n]
}

// largestLinked is how many of cands at most are linked by NVLink
// pairwise (1 for a lone device, 0 for none).
func largestLinked(cands []rankedDevice) int {
	slices.SortFunc(cands, rankedLess)
	for n := len(cands); n > 1; n-- {
		if linked(cands, n, true) != nil {
			return n
		}
	}
	return min(len(cands), 1)
}

// linkedSet runs the search s at each level from NVLink down (to NVLink
// alone with nvlinkOnly) and returns the first set it finds, in the
// device order, or nil.
func linkedSet(s linkSearch, nvlinkOnly bool) []rankedDevice {
	last := linkSys
	if nvlinkOnly {
		last = linkNVLink
	}
	s.set = make([]int, 0, s.n)
	for s.level = linkNVLink; s.level <= last; s.level++ {
		s.budget, s.set = max(linkChecks, s.n*s.n), s.set[:0]
		if s.grow(0) {
			pick := make([]rankedDevice, s.n)
			for k, i := range s.set {
				pick[k] = s.cands[i]
			}
			slices.SortFunc(pick, rankedLess)
			return pick
		}
	}
	return nil
}

// linkChecks bounds the pairs of devices linked tests at one level, for
// claims of up to 128 devices.
const linkChecks = 1 << 14

// linkSearch finds, depth first in the device order, the first n
// candidates that reach each other pairwise at level or better. With
// quota set, candidate i is of kind kind[i], and a set takes quota[k] of
// kind k (the quotas sum to n).
type linkSearch struct {
	cands  []rankedDevice
	n      int
	kind   []int
	quota  []int
	level  linkLevel
	budget int
	set    []int // indices into cands, ascending
}

// grow extends set with candidates from index from on, and reports
// whether it reached n devices.
func (s *linkSearch) grow(from int) bool {
	if len(s.set) == s.n {
		return true
	}
	for i := from; i+s.n-len(s.set) <= len(s.cands); i++ {
		if s.quota != nil && s.quota[s.kind[i]] == 0 {
			continue
		}
		reaches := true
		for _, j := range s.set {
			if s.budget == 0 {
				return false
			}
			s.budget--
			if link(s.cands[j].d, s.cands[i].d) > s.level {
				reaches = false
				break
			}
		}
		if reaches {
			s.set = append(s.set, i)
			if s.quota != nil {
				s.quota[s.kind[i]]--
			}
			if s.grow(i + 1) {
				return true
			}
			s.set = s.set[:len(s.set)-1]
			if s.quota != nil {
				s.quota[s.kind[i]]++
			}
		}
	}
	return false
}

// nearNUMA moves to the front, keeping their order, the candidates on a
// NUMA node of the devices already taken (numas); the others follow.
func nearNUMA(cands []rankedDevice, numas []int) {
	if len(numas) == 0 {
		return
	}
	near := func(c rankedDevice) bool {
		return c.d.Topology != nil && c.d.Topology.NUMA != nil && slices.Contains(numas, *c.d.Topology.NUMA)
	}
	slices.SortStableFunc(cands, func(a, b rankedDevice) int {
		switch na, nb := near(a), near(b); {
		case na && !nb:
			return -1
		case nb && !na:
			return 1
		}
		return 0
	})
}
