package fsm

// Policy names how devices are chosen among those that fit.
type Policy string

// The seven placement policies (see DESIGN.md, Policies).
const (
	FirstFit           Policy = "FirstFit"
	BestFit            Policy = "BestFit"
	WorstFit           Policy = "WorstFit"
	RoundRobin         Policy = "RoundRobin"
	PriorityBased      Policy = "PriorityBased"
	LoadBalanced       Policy = "LoadBalanced"
	FragmentationAware Policy = "FragmentationAware"
)

// Policies lists every policy in a stable order.
var Policies = []Policy{FirstFit, BestFit, WorstFit, RoundRobin, PriorityBased, LoadBalanced, FragmentationAware}

// Valid reports whether p is a known policy.
func (p Policy) Valid() bool { return policyDefs[p] != nil }

// policyDef is everything a policy decides. Placement runs the same
// filter chain for every policy (filter.go); the policy only ranks what
// passed, through one of two placers:
//
//   - inOrder walks hosts in a host order and takes the first host that
//     can take the whole request; on it, each claim takes the host's
//     fitting devices in a device order. A one-device request may instead
//     take the first fitting device of the whole cluster in the device
//     order (global), found through the class index.
//   - leastFragmenting scores every host that can take the request and
//     takes the one whose fragmentation rises least (frag*.go).
//
// Ties always go to the lower host ID, then the lower device ID.
type policyDef struct {
	place placer
	// cursor: a placement moves the type's cursor to the device its first
	// claim took; the cursor orders read it.
	cursor bool
	// preempts: a request that fits nowhere may end allocations of lower
	// priority (by at least the policy's gap) to make room (preempt.go).
	preempts bool
	// gang is how a gang's parts are spread over hosts (gang.go).
	gang gangShape
}

// policyDefs defines each policy once. The orders they are built from are
// in orders.go; a policy that needs a new order adds it there.
var policyDefs = map[Policy]*policyDef{
	// FirstFit: the fitting device with the lowest ID; for larger requests
	// the host with the lowest ID that can take them, devices by ID.
	FirstFit: {place: inOrder{hosts: hostsByID, devices: devicesByID, global: true}},
	// RoundRobin: as FirstFit, but starting after the device (host) the
	// type's last placement took, wrapping around.
	RoundRobin: {place: inOrder{hosts: hostsAfterCursor, devices: devicesAfterCursor, global: true}, cursor: true},
	// BestFit: the fitting device that leaves the least capacity unused;
	// for larger requests the host with the least free capacity (every
	// type counted) that can take them, each claim on the devices it
	// wastes least.
	BestFit: {place: inOrder{hosts: hostsLeastFree, devices: devicesLeastWaste, global: true}},
	// WorstFit: the reverse of BestFit.
	WorstFit: {place: inOrder{hosts: hostsMostFree, devices: devicesMostWaste, global: true}, gang: gangSpreads},
	// PriorityBased: places as BestFit; a request that fits nowhere may
	// preempt. (The queue serves every policy by priority.)
	PriorityBased: {place: inOrder{hosts: hostsLeastFree, devices: devicesLeastWaste, global: true}, preempts: true},
	// LoadBalanced: the host least utilised in the request's first type,
	// then its least used devices, for every request size.
	LoadBalanced: {place: inOrder{hosts: hostsLeastUtilised, devices: devicesLeastUsed}, gang: gangSpreads},
	// FragmentationAware: where the cluster's free capacity fragments
	// least under the typical recent requests (after FGD, ATC'23).
	FragmentationAware: {place: leastFragmenting{}},
}

// definition returns a policy's definition; an unknown policy (refused
// before it reaches the state) places as FirstFit.
func definition(p Policy) *policyDef {
	if d := policyDefs[p]; d != nil {
		return d
	}
	return policyDefs[FirstFit]
}

// DefaultPreemptionGap is how much lower a victim's priority must be under
// PriorityBased when the policy does not say.
const DefaultPreemptionGap = 10

// PolicyConfig is the policy in force for a device type or a pool.
type PolicyConfig struct {
	Policy Policy `json:"policy"`
	// PreemptionGap applies to PriorityBased: a request may preempt
	// allocations whose priority is lower by at least this much.
	PreemptionGap int `json:"preemption_gap,omitempty"`
}

// gap returns the preemption gap, defaulted.
func (c PolicyConfig) gap() int {
	if c.PreemptionGap <= 0 {
		return DefaultPreemptionGap
	}
	return c.PreemptionGap
}

// DefaultPolicies are the policies a fresh state starts with. GPUs are
// packed (BestFit keeps big GPUs for big requests), CPUs and NICs are spread
// (LoadBalanced avoids hot hosts), memory is packed, storage is spread
// (WorstFit leaves room to grow). A type not listed gets FirstFit.
var DefaultPolicies = map[DeviceType]Policy{
	GPU:     BestFit,
	CPU:     LoadBalanced,
	Memory:  BestFit,
	Storage: WorstFit,
	Network: LoadBalanced,
}

// policyFor returns the policy for a claim's type and pool: the pool's
// override if it has one, else the type's, else FirstFit.
func (s *State) policyFor(t DeviceType, pool string) PolicyConfig {
	if pool != "" {
		if c, ok := s.poolPolicies[pool]; ok {
			return c
		}
	}
	if c, ok := s.typePolicies[t]; ok {
		return c
	}
	return PolicyConfig{Policy: FirstFit}
}

// requestPolicy is the policy that places a request: that of its first
// claim's type and pool.
func (s *State) requestPolicy(r *Request) PolicyConfig {
	return s.policyFor(r.Claims[0].Type, r.claimPool(0))
}
