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
func (p Policy) Valid() bool {
	for _, k := range Policies {
		if k == p {
			return true
		}
	}
	return false
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
