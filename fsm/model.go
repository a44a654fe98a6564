package fsm

import (
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

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

// Valid reports whether t is one of DeviceTypes.
func (t DeviceType) Valid() bool {
	for _, k := range DeviceTypes {
		if k == t {
			return true
		}
	}
	return false
}

// DeviceStatus is the administrative or observed state of a device.
type DeviceStatus string

// Device states. Offline is never set directly: a device reads offline
// while its host is down.
const (
	Available DeviceStatus = "available"
	Draining  DeviceStatus = "draining"
	Unhealthy DeviceStatus = "unhealthy"
	Offline   DeviceStatus = "offline"
)

// Valid reports whether s may be set by a command (offline may not).
func (s DeviceStatus) Valid() bool {
	return s == Available || s == Draining || s == Unhealthy
}

// numDims is the number of numeric capability dimensions.
const numDims = 4

// dimNames names the numeric dimensions in Resources order.
var dimNames = [numDims]string{"memory_gb", "compute_units", "storage_gb", "bandwidth_gbps"}

// Resources is an amount in every numeric dimension: a device's capacity, a
// request's threshold or the amount a shareable claim takes.
type Resources struct {
	MemoryGB      float64 `json:"memory_gb,omitempty"`
	ComputeUnits  float64 `json:"compute_units,omitempty"`
	StorageGB     float64 `json:"storage_gb,omitempty"`
	BandwidthGbps float64 `json:"bandwidth_gbps,omitempty"`
}

type vec [numDims]float64

func (r Resources) vec() vec { return vec{r.MemoryGB, r.ComputeUnits, r.StorageGB, r.BandwidthGbps} }

func (v vec) resources() Resources {
	return Resources{MemoryGB: v[0], ComputeUnits: v[1], StorageGB: v[2], BandwidthGbps: v[3]}
}

// IsZero reports whether every dimension is zero.
func (r Resources) IsZero() bool { return r == Resources{} }

// eps absorbs float rounding when amounts are added and taken away.
const eps = 1e-9

func (v vec) add(o vec) vec {
	for i := range v {
		v[i] += o[i]
	}
	return v
}

func (v vec) sub(o vec) vec {
	for i := range v {
		v[i] -= o[i]
		if math.Abs(v[i]) < eps {
			v[i] = 0
		}
	}
	return v
}

// covers reports whether v is at least o in every dimension.
func (v vec) covers(o vec) bool {
	for i := range v {
		if v[i]+eps < o[i] {
			return false
		}
	}
	return true
}

// anyAbove reports whether some dimension of v exceeds x.
func (v vec) anyAbove(x float64) bool {
	for i := range v {
		if v[i] > x {
			return true
		}
	}
	return false
}

func (r Resources) valid() bool {
	for _, x := range r.vec() {
		if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
			return false
		}
	}
	return true
}

// Capabilities are a device's numeric capacities and free-form custom values.
// In a claim they are thresholds: each number is a minimum, each custom
// value must equal the device's (a value "a|b" accepts either).
type Capabilities struct {
	Resources
	Custom map[string]string `json:"custom,omitempty"`
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
	// Topology is the device's NUMA node and links on its host
	// (topology.go).
	Topology *Topology `json:"topology,omitempty"`
}

// Device is a device in the scheduler state.
type Device struct {
	DeviceSpec
	Host   string       `json:"host"`
	Status DeviceStatus `json:"status"`
	// Used is the capacity taken by active allocations. An exclusive
	// device with an allocation has Used equal to its capacity.
	Used Resources `json:"used"`
	// Allocations are the IDs of the active allocations on the device, sorted.
	Allocations []string `json:"allocations,omitempty"`

	cls     *class
	indexed bool
	idxFree float64
	// useCounted: the use of its allocations is in State.use (quota.go).
	useCounted bool
}

// Free is the device's free capacity.
func (d *Device) Free() Resources { return d.Capabilities.vec().sub(d.Used.vec()).resources() }

// HostSpec describes a host as it registers.
type HostSpec struct {
	ID      string            `json:"id"`
	Address string            `json:"address,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// Host is a host in the scheduler state.
type Host struct {
	HostSpec
	Up bool `json:"up"`
	// Since is when the host last changed between up and down.
	Since int64 `json:"since"`
	// Devices are the IDs of the host's devices, sorted.
	Devices []string `json:"devices"`
	// InventoryHash is the hash of the inventory the host was last
	// registered with, as its RegisterHost command carried it (empty for
	// a host registered through the API). A new leader skips
	// re-registering a live host whose gossiped hash equals it.
	InventoryHash string `json:"inventory_hash,omitempty"`
	// Drain is set while the host is drained: it takes no new work.
	Drain *HostDrain `json:"drain,omitempty"`

	load map[DeviceType]*hostLoad
}

// HostDrain is a host's drain: since when, and the deadline (Unix
// nanoseconds, 0 for none) at which the allocations still on it end as
// drained. Ended says the deadline came and ended them.
type HostDrain struct {
	Since    int64 `json:"since"`
	Deadline int64 `json:"deadline,omitempty"`
	Ended    bool  `json:"ended,omitempty"`
}

// Schedulable reports whether the host can take new work: up and not
// drained.
func (h *Host) Schedulable() bool { return h.Up && h.Drain == nil }

// LabelSelector says which device labels a request needs, prefers and refuses.
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
	// Amount is what the claim takes from each shareable device. Zero takes
	// a whole device. Exclusive devices are always taken whole.
	Amount Resources `json:"amount"`
	// Topology "nvlink" takes only devices linked by NVLink pairwise;
	// empty prefers the best-linked devices (topology.go).
	Topology string `json:"topology,omitempty"`
}

// Request is what a client asks for: every claim lands on one host, at
// once; a gang (MaxHosts > 1) spreads its first claim over several hosts,
// still at once (gang.go).
type Request struct {
	Claims   []Claim       `json:"claims"`
	Priority int           `json:"priority"`
	Timeout  time.Duration `json:"timeout"`
	LeaseTTL time.Duration `json:"lease_ttl,omitempty"`
	Pool     string        `json:"pool,omitempty"`
	Labels   LabelSelector `json:"labels"`
	// MaxHosts above 1 makes the request a gang: the first claim's
	// devices may be split over up to MaxHosts hosts, each taking at
	// least MinPerHost of them (1 when 0) and every other claim whole.
	MaxHosts   int `json:"max_hosts,omitempty"`
	MinPerHost int `json:"min_per_host,omitempty"`
	// Same, for a gang, names a host label every host of the gang must
	// carry with one value (one rack, one zone).
	Same string `json:"same,omitempty"`
	// Host, when set, takes devices of that host only (dmsc run -here).
	Host string `json:"host,omitempty"`
}

// MaxPriority is the highest request priority.
const MaxPriority = 1000

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

// AllocStatuses lists every status in a stable order.
var AllocStatuses = []AllocStatus{Pending, Active, Released, Expired, TimedOut, Preempted, Lost, Failed, Cancelled, Drained}

// Live reports whether the status is pending or active.
func (s AllocStatus) Live() bool { return s == Pending || s == Active }

// Assignment is one device taken by an allocation, for one claim.
type Assignment struct {
	DeviceID string    `json:"device_id"`
	Claim    int       `json:"claim"`
	Amount   Resources `json:"amount"`
}

// MaxIDLength bounds the IDs of hosts, devices and pools.
const MaxIDLength = 256

// ValidID reports whether s may identify a host, a device or a pool: 1 to
// 256 bytes of ASCII letters, digits and '-', '_', '.', ':', '@', '+',
// '=', and not "." or "..". No spaces, slashes, control characters or
// escape sequences: an ID is safe in a path, a log line and a terminal.
func ValidID(s string) bool {
	if s == "" || len(s) > MaxIDLength || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:@+=", c) >= 0) {
			return false
		}
	}
	return true
}

// DefaultNamespace is the namespace of a command that names none.
const DefaultNamespace = "default"

// MaxNamespaceLength bounds a namespace's name.
const MaxNamespaceLength = 64

// ValidNamespace reports whether s may name a namespace: 1 to 64 ASCII
// letters, digits, '-' and '_'.
func ValidNamespace(s string) bool {
	if s == "" || len(s) > MaxNamespaceLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// Allocation is a request and what became of it.
type Allocation struct {
	ID        string `json:"id"`
	RequestID string `json:"request_id,omitempty"`
	// Namespace is the namespace the allocation belongs to.
	Namespace string      `json:"namespace"`
	Request   Request     `json:"request"`
	Status    AllocStatus `json:"status"`
	Policy    Policy      `json:"policy"`
	// Host is the allocation's host; a gang's first host by ID, its
	// hosts all in Hosts.
	Host    string       `json:"host,omitempty"`
	Hosts   []string     `json:"hosts,omitempty"`
	Devices []Assignment `json:"devices,omitempty"`
	// Reserved, on a waiting gang, are the hosts held for it: their
	// devices of its first claim's type take no other work (reserve.go).
	Reserved []string `json:"reserved,omitempty"`
	// ExpectedStart is derived, set only on what a read returns (never
	// stored): for a waiting gang with a reservation, when the leases on
	// its reserved hosts say enough devices will be free; 0 when some it
	// needs are held without a lease.
	ExpectedStart int64 `json:"expected_start,omitempty"`
	// Seq orders allocations by arrival.
	Seq         uint64 `json:"seq"`
	CreateIndex uint64 `json:"create_index"`
	ModifyIndex uint64 `json:"modify_index"`
	// Times are Unix nanoseconds from the leader's stamp; zero when unset.
	RequestedAt    int64 `json:"requested_at"`
	AllocatedAt    int64 `json:"allocated_at,omitempty"`
	EndedAt        int64 `json:"ended_at,omitempty"`
	Deadline       int64 `json:"deadline,omitempty"`
	LeaseExpiresAt int64 `json:"lease_expires_at,omitempty"`
	// PreemptedBy is the allocation that preempted this one.
	PreemptedBy string `json:"preempted_by,omitempty"`
	// Preempted are the allocations this one preempted.
	Preempted []string `json:"preempted,omitempty"`
	// Preempting is set on an active allocation whose borrowed devices
	// are reclaimed, during its grace (reclaim.go).
	Preempting *Preempting `json:"preempting,omitempty"`
	// Reason says why the allocation ended, in words.
	Reason string  `json:"reason,omitempty"`
	WhyNot *WhyNot `json:"why_not,omitempty"`
}

// Clone returns a copy that shares nothing the state changes.
func (a *Allocation) Clone() *Allocation { return a.clone() }

// clone returns a deep enough copy for callers outside the state.
func (a *Allocation) clone() *Allocation {
	c := *a
	c.Devices = append([]Assignment(nil), a.Devices...)
	c.Preempted = append([]string(nil), a.Preempted...)
	c.Hosts = slices.Clone(a.Hosts)
	c.Reserved = slices.Clone(a.Reserved)
	if a.Preempting != nil {
		p := *a.Preempting
		c.Preempting = &p
	}
	return &c
}

// PrimaryType is the type of the request's first claim, under which
// statistics count the allocation.
func (r *Request) PrimaryType() DeviceType {
	if len(r.Claims) == 0 {
		return ""
	}
	return r.Claims[0].Type
}

// claimPool is the pool a claim is restricted to, or "" for any.
func (r *Request) claimPool(i int) string {
	if r.Claims[i].Pool != "" {
		return r.Claims[i].Pool
	}
	return r.Pool
}

// customMatches reports whether a device's custom value satisfies want,
// where want may list alternatives separated by "|".
func customMatches(have, want string) bool {
	if want == have {
		return true
	}
	if !strings.Contains(want, "|") {
		return false
	}
	for _, alt := range strings.Split(want, "|") {
		if alt == have {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func insertSorted(list []string, s string) []string {
	i := sort.SearchStrings(list, s)
	if i < len(list) && list[i] == s {
		return list
	}
	list = append(list, "")
	copy(list[i+1:], list[i:])
	list[i] = s
	return list
}

func removeSorted(list []string, s string) []string {
	i := sort.SearchStrings(list, s)
	if i < len(list) && list[i] == s {
		return append(list[:i], list[i+1:]...)
	}
	return list
}
