package fsm

import "math"

// Orders are what the policies (policy.go) are built from: how a claim
// ranks the devices it may take, and in what order a request tries hosts.
// Each order is defined once here, together with what makes it fast: a
// device order may bring an indexed search for its first device in the
// whole cluster (search.go); a host order is kept by the host index
// (hostindex.go) for every class of devices.

// deviceOrder ranks the devices a claim may take: by key, least first,
// ties to the lower device ID.
type deviceOrder struct {
	name string
	// key ranks device d for claim cl, with the overlay's changes applied.
	key func(s *State, d *Device, cl *Claim, ov *overlay) float64
	// first, when set, finds the first fitting device of the whole cluster
	// in this order among the classes, or nil: what a one-device request
	// takes under a global inOrder placer.
	first func(s *State, classes []*class, cl *Claim) *Device
}

var (
	devicesByID = &deviceOrder{name: "device ID", key: noKey,
		first: func(s *State, classes []*class, cl *Claim) *Device { return s.firstFitting(classes, cl, "") }}
	// devicesAfterCursor ranks a host's devices by ID; across the cluster
	// it starts after the type's cursor and wraps around.
	devicesAfterCursor = &deviceOrder{name: "device ID after the cursor", key: noKey, first: (*State).nextAfterCursor}
	devicesLeastWaste  = &deviceOrder{name: "least waste", key: (*State).waste,
		first: func(s *State, classes []*class, cl *Claim) *Device { return s.bestScored(classes, cl, false) }}
	devicesMostWaste = &deviceOrder{name: "most waste",
		key:   func(s *State, d *Device, cl *Claim, ov *overlay) float64 { return -s.waste(d, cl, ov) },
		first: func(s *State, classes []*class, cl *Claim) *Device { return s.bestScored(classes, cl, true) }}
	devicesLeastUsed = &deviceOrder{name: "least used",
		key: func(_ *State, d *Device, _ *Claim, _ *overlay) float64 { return deviceUtil(d) }}
)

func noKey(*State, *Device, *Claim, *overlay) float64 { return 0 }

// hostRank is a key the host index files hosts by, per class of devices;
// t is the class's type.
type hostRank struct {
	slot int
	key  func(f *hostFigures, t DeviceType) float64
}

// hostOrder is the order a request tries hosts in: by a rank, least first,
// ties to the lower host ID; fromCursor starts after the host of the
// type's cursor device and wraps around.
type hostOrder struct {
	name       string
	rank       *hostRank
	fromCursor bool
}

var (
	rankNone = newHostRank(func(*hostFigures, DeviceType) float64 { return 0 })
	// rankFree is the free capacity the host keeps over all its available
	// devices, every type on its common scale: a CPU-only request still
	// weighs the host's free GPUs.
	rankFree     = newHostRank(func(f *hostFigures, _ DeviceType) float64 { return f.free })
	rankMostFree = newHostRank(func(f *hostFigures, _ DeviceType) float64 { return -f.free })
	// rankUtil is the host's mean utilisation of the type.
	rankUtil = newHostRank(func(f *hostFigures, t DeviceType) float64 { return f.util[typeSlot(t)] })

	hostsByID          = &hostOrder{name: "host ID", rank: rankNone}
	hostsAfterCursor   = &hostOrder{name: "host ID after the cursor", rank: rankNone, fromCursor: true}
	hostsLeastFree     = &hostOrder{name: "least free capacity", rank: rankFree}
	hostsMostFree      = &hostOrder{name: "most free capacity", rank: rankMostFree}
	hostsLeastUtilised = &hostOrder{name: "least utilised", rank: rankUtil}
)

// maxHostRanks bounds the ranks the host index keeps.
const maxHostRanks = 8

// hostRankList holds every rank by slot.
var hostRankList []*hostRank

func newHostRank(key func(f *hostFigures, t DeviceType) float64) *hostRank {
	r := &hostRank{slot: len(hostRankList), key: key}
	hostRankList = append(hostRankList, r)
	return r
}

// waste is what a device would keep unused by this claim, on the type's
// common scale: for a whole device, its capacity beyond the claim's
// thresholds; for a share, its free capacity beyond the amount.
func (s *State) waste(d *Device, cl *Claim, ov *overlay) float64 {
	c := d.cls
	if wholeTake(c, cl) {
		return wholeWaste(c, cl, s.normOf(c.typ))
	}
	used := d.Used.vec()
	if ov != nil {
		used = used.add(ov.used[d.ID])
	}
	return onScale(c.caps.sub(used).sub(cl.Amount.vec()), s.normOf(d.Type))
}

// wholeWaste is the waste of a claim that takes whole devices of class c:
// the same for every device of the class.
func wholeWaste(c *class, cl *Claim, norm vec) float64 {
	return onScale(c.caps.sub(cl.Capabilities.vec()), norm)
}

// onScale puts an amount on a type's common scale norm: the sum over the
// dimensions of amount/norm, positive parts only, on a 1e-9 grid.
func onScale(v, norm vec) float64 {
	w := 0.0
	for i, x := range v {
		if norm[i] > 0 && x > 0 {
			w += x / norm[i]
		}
	}
	return roundScore(w)
}

// roundScore puts a score on a 1e-9 grid, so float noise never decides
// between equal placements: ties go to the lower ID.
func roundScore(x float64) float64 { return math.Round(x*1e9) / 1e9 }
