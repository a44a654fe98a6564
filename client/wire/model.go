package wire

// DeviceType is the kind of a device.
type DeviceType string

// The device types dmsc knows.
const (
	CPU      DeviceType = "CPU"
	GPU      DeviceType = "GPU"
	Memory   DeviceType = "Memory"
	Storage  DeviceType = "Storage"
	Network  DeviceType = "Network"
	Sensor   DeviceType = "Sensor"
	Actuator DeviceType = "Actuator"
	Custom   DeviceType = "Custom"
)

// DeviceTypes lists every device type in a stable order.
var DeviceTypes = []DeviceType{CPU, GPU, Memory, Storage, Network, Sensor, Actuator, Custom}

// DeviceStatus is the administrative or observed state of a device.
type DeviceStatus string

// Device states. Offline is never set: a device reads offline while its
// host is down.
const (
	Available DeviceStatus = "available"
	Draining  DeviceStatus = "draining"
	Unhealthy DeviceStatus = "unhealthy"
	Offline   DeviceStatus = "offline"
)

// Policy names how devices are chosen among those that fit.
type Policy string

// The placement policies.
const (
	FirstFit           Policy = "FirstFit"
	BestFit            Policy = "BestFit"
	WorstFit           Policy = "WorstFit"
	RoundRobin         Policy = "RoundRobin"
	PriorityBased      Policy = "PriorityBased"
	LoadBalanced       Policy = "LoadBalanced"
	FragmentationAware Policy = "FragmentationAware"
)

// KnownPolicies lists every policy in a stable order.
var KnownPolicies = []Policy{FirstFit, BestFit, WorstFit, RoundRobin, PriorityBased, LoadBalanced, FragmentationAware}

// DefaultPreemptionGap is the preemption gap of PriorityBased when the
// policy does not set one.
const DefaultPreemptionGap = 10

// PolicyConfig is the policy in force for a device type or a pool.
type PolicyConfig struct {
	Policy Policy `json:"policy"`
	// PreemptionGap applies to PriorityBased: a request may preempt
	// allocations whose priority is lower by at least this much.
	PreemptionGap int `json:"preemption_gap,omitempty"`
}

// AllocStatus is an allocation's place in its life.
type AllocStatus string

// Allocation states. Pending and Active are live; the rest are final.
const (
	Pending   AllocStatus = "pending"
	Active    AllocStatus = "active"
	Released  AllocStatus = "released"
	Expired   AllocStatus = "expired"
	TimedOut  AllocStatus = "timed_out"
	Preempted AllocStatus = "preempted"
	Lost      AllocStatus = "lost"
	Failed    AllocStatus = "failed"
	Cancelled AllocStatus = "cancelled"
	Drained   AllocStatus = "drained"
)

// AllocStatuses lists every allocation status in a stable order.
var AllocStatuses = []AllocStatus{Pending, Active, Released, Expired, TimedOut, Preempted, Lost, Failed, Cancelled, Drained}

// Resources is an amount in every numeric dimension: a device's capacity,
// a claim's threshold or the amount a shareable claim takes.
type Resources struct {
	MemoryGB      float64 `json:"memory_gb,omitempty"`
	ComputeUnits  float64 `json:"compute_units,omitempty"`
	StorageGB     float64 `json:"storage_gb,omitempty"`
	BandwidthGbps float64 `json:"bandwidth_gbps,omitempty"`
}

// Capabilities are a device's numeric capacities and free-form custom
// values. In a claim they are thresholds: each number is a minimum, each
// custom value must equal the device's (a value "a|b" accepts either).
type Capabilities struct {
	Resources
	Custom map[string]string `json:"custom,omitempty"`
}

// LabelSelector says which device labels a request needs, prefers and
// refuses.
type LabelSelector struct {
	// Required labels must all be present with these values.
	Required map[string]string `json:"required,omitempty"`
	// Preferred labels rank devices that carry more of them first.
	Preferred map[string]string `json:"preferred,omitempty"`
	// Forbidden labels exclude a device that carries one; the value "*"
	// excludes any device with the key.
	Forbidden map[string]string `json:"forbidden,omitempty"`
}

// Claim asks for Count devices of one type on the request's host.
type Claim struct {
	Type  DeviceType `json:"type"`
	Count int        `json:"count"`
	// Pool restricts this claim to a pool; empty uses the request's pool.
	Pool string `json:"pool,omitempty"`
	// Capabilities are minimums each device must have.
	Capabilities Capabilities `json:"capabilities"`
	// Amount is what the claim takes from each shareable device. Zero
	// takes a whole device. Exclusive devices are always taken whole.
	Amount Resources `json:"amount"`
	// Topology "nvlink" takes only devices linked by NVLink pairwise;
	// empty prefers the best-linked devices of a host.
	Topology string `json:"topology,omitempty"`
}

// Assignment is one device taken by an allocation, for one claim.
type Assignment struct {
	DeviceID string    `json:"device_id"`
	Claim    int       `json:"claim"`
	Amount   Resources `json:"amount"`
}

// DeviceSpec describes a device as its host reports it.
type DeviceSpec struct {
	ID           string            `json:"id"`
	Type         DeviceType        `json:"type"`
	Name         string            `json:"name,omitempty"`
	Pool         string            `json:"pool,omitempty"`
	Capabilities Capabilities      `json:"capabilities"`
	Labels       map[string]string `json:"labels,omitempty"`
	Shareable    bool              `json:"shareable,omitempty"`
	// Topology is the device's NUMA node and its links to the host's
	// other devices (GPUs: as nvidia-smi topo -m reports them).
	Topology *Topology `json:"topology,omitempty"`
}

// Topology is where a device sits on its host.
type Topology struct {
	// NUMA is the device's NUMA node, when known.
	NUMA *int `json:"numa,omitempty"`
	// Links are its links to other devices of the host, by device ID:
	// "NV<n>" (n bonded NVLinks), "PIX", "PXB", "PHB", "NODE" or "SYS".
	Links map[string]string `json:"links,omitempty"`
}

// Device is a device as the API shows it.
type Device struct {
	DeviceSpec
	Host   string       `json:"host"`
	Status DeviceStatus `json:"status"`
	// Used is the capacity taken by active allocations. An exclusive
	// device with an allocation has Used equal to its capacity.
	Used Resources `json:"used"`
	// Allocations are the IDs of the active allocations on the device,
	// sorted.
	Allocations []string `json:"allocations,omitempty"`
}

// WhyNot explains a refusal: how many devices each filter removed for
// each claim, and why the hosts that had some fitting devices were not
// enough.
type WhyNot struct {
	Devices int           `json:"devices"`
	Hosts   int           `json:"hosts"`
	Claims  []ClaimWhyNot `json:"claims"`
	// HostsRejected counts hosts that had fitting devices for every claim
	// one by one, but not for all claims together.
	HostsRejected int `json:"hosts_rejected,omitempty"`
	// Quota, when set, is the limit of the namespace's quota the request
	// would pass; Summary then says the same.
	Quota string `json:"quota,omitempty"`
	// Gang, for a gang, says what each host and domain could take of it.
	Gang    *GangWhyNot `json:"gang,omitempty"`
	Summary string      `json:"summary"`
}

// GangWhyNot is the why-not of a gang: what it could take of its first
// claim now, per host and per domain.
type GangWhyNot struct {
	// Count devices over at most MaxHosts hosts, at least MinPerHost
	// each, all with one value of host label Same (when set).
	Count      int    `json:"count"`
	MaxHosts   int    `json:"max_hosts"`
	MinPerHost int    `json:"min_per_host"`
	Same       string `json:"same,omitempty"`
	// HostsAble can each take at least MinPerHost; Best are the hosts
	// that could take the most (in the best domain with Same), BestTotal
	// what they could take together.
	HostsAble int        `json:"hosts_able"`
	Best      []GangHost `json:"best,omitempty"`
	BestTotal int        `json:"best_total"`
	// Domains are the label's values that could take the most (with
	// Same); HostsUnlabelled lack the label.
	Domains         []GangDomain `json:"domains,omitempty"`
	HostsUnlabelled int          `json:"hosts_unlabelled,omitempty"`
}

// GangHost is what one host could take of a gang.
type GangHost struct {
	Host string `json:"host"`
	Take int    `json:"take"`
}

// GangDomain is what one value of a gang's Same label could take.
type GangDomain struct {
	Value     string `json:"value"`
	HostsAble int    `json:"hosts_able"`
	Total     int    `json:"total"`
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
	// HostsWithSome have at least one fitting device; HostsWithEnough
	// have at least Count.
	HostsWithSome   int `json:"hosts_with_some"`
	HostsWithEnough int `json:"hosts_with_enough"`
}

// Reason is one filter's verdict.
type Reason struct {
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}
