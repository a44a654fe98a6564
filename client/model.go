package client

import "github.com/dmsc/dmsc/client/wire"

// The scheduler's vocabulary as the API speaks it, under the client's
// name: what a request is made of and what the answers hold.
type (
	// DeviceType is the kind of a device: CPU, GPU, Memory, ...
	DeviceType = wire.DeviceType
	// DeviceStatus is available, draining, unhealthy or offline.
	DeviceStatus = wire.DeviceStatus
	// Policy names a placement policy.
	Policy = wire.Policy
	// AllocStatus is an allocation's place in its life.
	AllocStatus = wire.AllocStatus
	// Resources is an amount in every numeric dimension.
	Resources = wire.Resources
	// Capabilities are numeric capacities and custom values; in a claim,
	// thresholds.
	Capabilities = wire.Capabilities
	// LabelSelector says which device labels a request needs, prefers and
	// refuses.
	LabelSelector = wire.LabelSelector
	// Claim asks for a number of devices of one type.
	Claim = wire.Claim
	// Assignment is one device an allocation took, for one claim.
	Assignment = wire.Assignment
	// DeviceSpec describes a device as its host registers it.
	DeviceSpec = wire.DeviceSpec
	// WhyNot explains a refusal: what each filter removed, per claim.
	WhyNot = wire.WhyNot
	// GangWhyNot is a gang's why-not: what each host and domain could take.
	GangWhyNot = wire.GangWhyNot
	// GangHost is what one host could take of a gang.
	GangHost = wire.GangHost
	// GangDomain is what one value of a gang's Same label could take.
	GangDomain = wire.GangDomain
	// ClaimWhyNot is the filter breakdown of one claim.
	ClaimWhyNot = wire.ClaimWhyNot
	// Reason is one filter's verdict.
	Reason = wire.Reason
	// OutcomeCounts count allocations by what became of them.
	OutcomeCounts = wire.OutcomeCounts
	// DurationStats summarise durations, in seconds.
	DurationStats = wire.DurationStats
	// DeviceCounts count devices by status.
	DeviceCounts = wire.DeviceCounts
)

// Device types.
const (
	CPU      = wire.CPU
	GPU      = wire.GPU
	Memory   = wire.Memory
	Storage  = wire.Storage
	Network  = wire.Network
	Sensor   = wire.Sensor
	Actuator = wire.Actuator
	Custom   = wire.Custom
)

// Device statuses.
const (
	Available = wire.Available
	Draining  = wire.Draining
	Unhealthy = wire.Unhealthy
	Offline   = wire.Offline
)

// Placement policies.
const (
	FirstFit           = wire.FirstFit
	BestFit            = wire.BestFit
	WorstFit           = wire.WorstFit
	RoundRobin         = wire.RoundRobin
	PriorityBased      = wire.PriorityBased
	LoadBalanced       = wire.LoadBalanced
	FragmentationAware = wire.FragmentationAware
)

// Allocation statuses.
const (
	Pending   = wire.Pending
	Active    = wire.Active
	Released  = wire.Released
	Expired   = wire.Expired
	TimedOut  = wire.TimedOut
	Preempted = wire.Preempted
	Lost      = wire.Lost
	Failed    = wire.Failed
	Cancelled = wire.Cancelled
	Drained   = wire.Drained
)
