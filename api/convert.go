package api

import (
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/fsm"
)

// The API speaks the types of package client/wire, the scheduler those of
// package fsm. This file is the one place each type is converted: XToWire
// for what the API answers, XFromWire for what it reads. The JSON of the
// two sides is the same except where a wire type says otherwise
// (durations as strings, times as RFC 3339); convert_test.go checks that
// no field is lost either way.

// mapSlice converts every element; nil stays nil, so that the JSON of a
// converted value is that of the original.
func mapSlice[T, U any](in []T, f func(T) U) []U {
	if in == nil {
		return nil
	}
	out := make([]U, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

// mapValues converts every key and value of a map; nil stays nil.
func mapValues[K1, K2 comparable, V1, V2 any](in map[K1]V1, k func(K1) K2, v func(V1) V2) map[K2]V2 {
	if in == nil {
		return nil
	}
	out := make(map[K2]V2, len(in))
	for key, val := range in {
		out[k(key)] = v(val)
	}
	return out
}

func deviceTypeToWire(t fsm.DeviceType) wire.DeviceType { return wire.DeviceType(t) }

// unixTime converts Unix nanoseconds, zero staying zero.
func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

func resourcesToWire(r fsm.Resources) wire.Resources {
	return wire.Resources{MemoryGB: r.MemoryGB, ComputeUnits: r.ComputeUnits, StorageGB: r.StorageGB, BandwidthGbps: r.BandwidthGbps}
}

func resourcesFromWire(r wire.Resources) fsm.Resources {
	return fsm.Resources{MemoryGB: r.MemoryGB, ComputeUnits: r.ComputeUnits, StorageGB: r.StorageGB, BandwidthGbps: r.BandwidthGbps}
}

func capabilitiesToWire(c fsm.Capabilities) wire.Capabilities {
	return wire.Capabilities{Resources: resourcesToWire(c.Resources), Custom: c.Custom}
}

func capabilitiesFromWire(c wire.Capabilities) fsm.Capabilities {
	return fsm.Capabilities{Resources: resourcesFromWire(c.Resources), Custom: c.Custom}
}

func labelSelectorToWire(l fsm.LabelSelector) wire.LabelSelector {
	return wire.LabelSelector{Required: l.Required, Preferred: l.Preferred, Forbidden: l.Forbidden}
}

func labelSelectorFromWire(l wire.LabelSelector) fsm.LabelSelector {
	return fsm.LabelSelector{Required: l.Required, Preferred: l.Preferred, Forbidden: l.Forbidden}
}

func claimToWire(c fsm.Claim) wire.Claim {
	return wire.Claim{
		Type: wire.DeviceType(c.Type), Count: c.Count, Pool: c.Pool,
		Capabilities: capabilitiesToWire(c.Capabilities), Amount: resourcesToWire(c.Amount), Topology: c.Topology,
	}
}

func claimFromWire(c wire.Claim) fsm.Claim {
	return fsm.Claim{
		Type: fsm.DeviceType(c.Type), Count: c.Count, Pool: c.Pool,
		Capabilities: capabilitiesFromWire(c.Capabilities), Amount: resourcesFromWire(c.Amount), Topology: c.Topology,
	}
}

// RequestToWire converts a scheduler request to the API's form, for
// programs that build requests with package fsm and send them through the
// API (the live trace replay).
func RequestToWire(r fsm.Request) wire.Request {
	return wire.Request{
		Claims: mapSlice(r.Claims, claimToWire), Priority: r.Priority, Timeout: wire.Duration(r.Timeout),
		LeaseTTL: wire.Duration(r.LeaseTTL), Pool: r.Pool, Labels: labelSelectorToWire(r.Labels),
		MaxHosts: r.MaxHosts, MinPerHost: r.MinPerHost, Same: r.Same, Host: r.Host,
	}
}

// requestFromWire converts an API request for the scheduler.
func requestFromWire(r wire.Request) fsm.Request {
	return fsm.Request{
		Claims: mapSlice(r.Claims, claimFromWire), Priority: r.Priority, Timeout: r.Timeout.Std(),
		LeaseTTL: r.LeaseTTL.Std(), Pool: r.Pool, Labels: labelSelectorFromWire(r.Labels),
		MaxHosts: r.MaxHosts, MinPerHost: r.MinPerHost, Same: r.Same, Host: r.Host,
	}
}

func assignmentToWire(a fsm.Assignment) wire.Assignment {
	return wire.Assignment{DeviceID: a.DeviceID, Claim: a.Claim, Amount: resourcesToWire(a.Amount)}
}

func reasonToWire(r fsm.Reason) wire.Reason { return wire.Reason{Reason: r.Reason, Count: r.Count} }

func reasonFromWire(r wire.Reason) fsm.Reason { return fsm.Reason{Reason: r.Reason, Count: r.Count} }

func claimWhyNotToWire(c fsm.ClaimWhyNot) wire.ClaimWhyNot {
	return wire.ClaimWhyNot{
		Claim: c.Claim, Type: wire.DeviceType(c.Type), Count: c.Count, Removed: mapSlice(c.Removed, reasonToWire),
		Fitting: c.Fitting, HostsWithSome: c.HostsWithSome, HostsWithEnough: c.HostsWithEnough,
	}
}

func claimWhyNotFromWire(c wire.ClaimWhyNot) fsm.ClaimWhyNot {
	return fsm.ClaimWhyNot{
		Claim: c.Claim, Type: fsm.DeviceType(c.Type), Count: c.Count, Removed: mapSlice(c.Removed, reasonFromWire),
		Fitting: c.Fitting, HostsWithSome: c.HostsWithSome, HostsWithEnough: c.HostsWithEnough,
	}
}

func whyNotToWire(w *fsm.WhyNot) *wire.WhyNot {
	if w == nil {
		return nil
	}
	return &wire.WhyNot{
		Devices: w.Devices, Hosts: w.Hosts, Claims: mapSlice(w.Claims, claimWhyNotToWire),
		HostsRejected: w.HostsRejected, Quota: w.Quota, Gang: gangWhyNotToWire(w.Gang), Summary: w.Summary,
	}
}

// WhyNotFromWire converts the why-not of an API answer for programs that
// judge refusals with package fsm's types (the live trace replay).
func WhyNotFromWire(w *wire.WhyNot) *fsm.WhyNot {
	if w == nil {
		return nil
	}
	return &fsm.WhyNot{
		Devices: w.Devices, Hosts: w.Hosts, Claims: mapSlice(w.Claims, claimWhyNotFromWire),
		HostsRejected: w.HostsRejected, Quota: w.Quota, Gang: gangWhyNotFromWire(w.Gang), Summary: w.Summary,
	}
}

func allocationToWire(a *fsm.Allocation) wire.Allocation {
	return wire.Allocation{
		ID: a.ID, RequestID: a.RequestID, Namespace: a.Namespace, Request: RequestToWire(a.Request), Status: wire.AllocStatus(a.Status),
		Policy: wire.Policy(a.Policy), Host: a.Host, Hosts: a.Hosts, Devices: mapSlice(a.Devices, assignmentToWire),
		Reserved: a.Reserved, ExpectedStart: unixTime(a.ExpectedStart),
		Seq: a.Seq, CreateIndex: a.CreateIndex, ModifyIndex: a.ModifyIndex,
		RequestedAt: unixTime(a.RequestedAt), AllocatedAt: unixTime(a.AllocatedAt), EndedAt: unixTime(a.EndedAt),
		Deadline: unixTime(a.Deadline), LeaseExpiresAt: unixTime(a.LeaseExpiresAt),
		PreemptedBy: a.PreemptedBy, Preempted: a.Preempted, Preempting: preemptingToWire(a.Preempting), Reason: a.Reason, WhyNot: whyNotToWire(a.WhyNot),
	}
}

func gangWhyNotToWire(g *fsm.GangWhyNot) *wire.GangWhyNot {
	if g == nil {
		return nil
	}
	return &wire.GangWhyNot{Count: g.Count, MaxHosts: g.MaxHosts, MinPerHost: g.MinPerHost, Same: g.Same,
		HostsAble: g.HostsAble, Best: mapSlice(g.Best, func(h fsm.GangHost) wire.GangHost { return wire.GangHost(h) }),
		BestTotal: g.BestTotal, Domains: mapSlice(g.Domains, func(d fsm.GangDomain) wire.GangDomain { return wire.GangDomain(d) }),
		HostsUnlabelled: g.HostsUnlabelled}
}

func gangWhyNotFromWire(g *wire.GangWhyNot) *fsm.GangWhyNot {
	if g == nil {
		return nil
	}
	return &fsm.GangWhyNot{Count: g.Count, MaxHosts: g.MaxHosts, MinPerHost: g.MinPerHost, Same: g.Same,
		HostsAble: g.HostsAble, Best: mapSlice(g.Best, func(h wire.GangHost) fsm.GangHost { return fsm.GangHost(h) }),
		BestTotal: g.BestTotal, Domains: mapSlice(g.Domains, func(d wire.GangDomain) fsm.GangDomain { return fsm.GangDomain(d) }),
		HostsUnlabelled: g.HostsUnlabelled}
}

func preemptingToWire(p *fsm.Preempting) *wire.Preempting {
	if p == nil {
		return nil
	}
	return &wire.Preempting{By: p.By, Deadline: unixTime(p.Deadline)}
}

// DeviceSpecToWire converts a device as a host reports it, for programs
// that build inventories with package fsm and register them through the
// API (the live trace replay).
func DeviceSpecToWire(d fsm.DeviceSpec) wire.DeviceSpec {
	return wire.DeviceSpec{
		ID: d.ID, Type: wire.DeviceType(d.Type), Name: d.Name, Pool: d.Pool,
		Capabilities: capabilitiesToWire(d.Capabilities), Labels: d.Labels, Shareable: d.Shareable,
		Topology: (*wire.Topology)(d.Topology),
	}
}

// DeviceSpecFromWire converts a device of a host registration for the
// scheduler.
func DeviceSpecFromWire(d wire.DeviceSpec) fsm.DeviceSpec {
	return fsm.DeviceSpec{
		ID: d.ID, Type: fsm.DeviceType(d.Type), Name: d.Name, Pool: d.Pool,
		Capabilities: capabilitiesFromWire(d.Capabilities), Labels: d.Labels, Shareable: d.Shareable,
		Topology: (*fsm.Topology)(d.Topology),
	}
}

func deviceToWire(d fsm.Device) wire.Device {
	return wire.Device{
		DeviceSpec: DeviceSpecToWire(d.DeviceSpec), Host: d.Host, Status: wire.DeviceStatus(d.Status),
		Used: resourcesToWire(d.Used), Allocations: d.Allocations,
	}
}

func hostToWire(h fsm.Host) wire.Host {
	devices := h.Devices
	if devices == nil {
		devices = []string{}
	}
	out := wire.Host{ID: h.ID, Address: h.Address, Labels: h.Labels, Up: h.Up, Since: unixTime(h.Since), Devices: devices, InventoryHash: h.InventoryHash}
	if d := h.Drain; d != nil {
		out.Drain = &wire.HostDrain{Since: unixTime(d.Since), Deadline: unixTime(d.Deadline), Ended: d.Ended}
	}
	return out
}

func policyConfigToWire(c fsm.PolicyConfig) wire.PolicyConfig {
	return wire.PolicyConfig{Policy: wire.Policy(c.Policy), PreemptionGap: c.PreemptionGap}
}

func policiesToWire(types map[fsm.DeviceType]fsm.PolicyConfig, pools map[string]fsm.PolicyConfig) wire.Policies {
	return wire.Policies{
		Types: mapValues(types, deviceTypeToWire, policyConfigToWire),
		Pools: mapValues(pools, func(p string) string { return p }, policyConfigToWire),
	}
}

func retentionToWire(r fsm.Retention) wire.Retention {
	return wire.Retention{MaxCount: r.MaxCount, MaxAge: wire.Duration(r.MaxAge)}
}

func retentionFromWire(r wire.RetentionRequest) fsm.Retention {
	return fsm.Retention{MaxCount: r.MaxCount, MaxAge: r.MaxAge.Std()}
}

func outcomeCountsToWire(c fsm.OutcomeCounts) wire.OutcomeCounts {
	return wire.OutcomeCounts{
		Total: c.Total, Successful: c.Successful, Released: c.Released, Failed: c.Failed, OverQuota: c.OverQuota, TimedOut: c.TimedOut,
		Preempted: c.Preempted, Expired: c.Expired, Lost: c.Lost, Cancelled: c.Cancelled, Drained: c.Drained,
		Active: c.Active, Pending: c.Pending,
	}
}

func durationStatsToWire(d fsm.DurationStats) wire.DurationStats {
	return wire.DurationStats{Count: d.Count, Mean: d.Mean, P50: d.P50, P95: d.P95}
}

func deviceCountsToWire(c fsm.DeviceCounts) wire.DeviceCounts {
	return wire.DeviceCounts{
		Total: c.Total, Available: c.Available, Draining: c.Draining, Unhealthy: c.Unhealthy,
		Offline: c.Offline, InUse: c.InUse,
	}
}

func statsToWire(s fsm.Stats) wire.Stats {
	return wire.Stats{
		Type: wire.DeviceType(s.Type), Pool: s.Pool, Policy: policyConfigToWire(s.Policy),
		Counts: outcomeCountsToWire(s.Counts), SuccessRate: s.SuccessRate,
		Duration: durationStatsToWire(s.Duration), QueueWait: durationStatsToWire(s.QueueWait),
		Utilisation: s.Utilisation, Fragmentation: s.Fragmentation, Devices: deviceCountsToWire(s.Devices),
	}
}

func poolInfoToWire(p fsm.PoolInfo) wire.PoolInfo {
	out := wire.PoolInfo{
		Name: p.Name, Types: mapSlice(p.Types, deviceTypeToWire), Devices: deviceCountsToWire(p.Devices),
		Policies: mapValues(p.Policies, deviceTypeToWire, policyConfigToWire),
	}
	if p.Override != nil {
		o := policyConfigToWire(*p.Override)
		out.Override = &o
	}
	return out
}

func recommendationToWire(r fsm.Recommendation) wire.Recommendation {
	return wire.Recommendation{
		Kind: wire.RecommendationKind(r.Kind), Type: wire.DeviceType(r.Type), Pool: r.Pool, Message: r.Message,
		Evidence: r.Evidence, Priority: wire.RecommendationPriority(r.Priority), Confidence: r.Confidence,
		Policy: wire.Policy(r.Policy), Devices: r.Devices, Namespace: r.Namespace,
	}
}

func policyConfigFromWire(r wire.PolicyRequest) fsm.PolicyConfig {
	return fsm.PolicyConfig{Policy: fsm.Policy(r.Policy), PreemptionGap: r.PreemptionGap}
}
