package main

import "testing"

// TestCLIQuota sets a namespace's quota from the command line: a request
// past it is refused (exit 3) with the limit named, another namespace is
// not bound by it, status shows the use against the limits, apply keeps
// the other limits, and delete lifts the quota.
func TestCLIQuota(t *testing.T) {
	apiNode(t)
	for _, tc := range []cliCase{
		{args: []string{"quota", "apply", "-namespace", "team-a", "-type", "GPU", "-max-count", "1"}, out: []string{"team-a", "GPU", "0 of 1"}},
		{args: []string{"quota", "apply", "-namespace", "team-a", "-type", "CPU", "-max-compute-units", "8"}, out: []string{"GPU", "0 of 1", "compute_units 0 of 8"}},
		{args: []string{"alloc", "-namespace", "team-a", "-type", "GPU"}, out: []string{"active"}},
		{args: []string{"alloc", "-namespace", "team-a", "-type", "GPU"}, code: exitCapacity,
			errOut: []string{"namespace team-a is at its quota: GPU, 1 of 1 devices held, 1 more asked"}},
		{args: []string{"alloc", "-namespace", "team-b", "-type", "GPU"}, out: []string{"active"}},
		{args: []string{"quota", "status", "team-a"}, out: []string{"1 of 1", "compute_units 0 of 8"}},
		{args: []string{"quota", "list"}, out: []string{"team-a", "GPU", "CPU"}},
		{args: []string{"quota", "status", "team-b"}, out: []string{"Namespace team-b has no quota"}},
		{args: []string{"quota", "apply", "-type", "GPU", "-max-count", "1"}, code: exitUsage},
		{args: []string{"quota", "apply", "-namespace", "team-a", "-type", "TPU", "-max-count", "1"}, code: exitUsage},
		{args: []string{"quota", "apply", "-namespace", "team-a", "-type", "GPU"}, code: exitUsage},
		{args: []string{"quota", "delete", "team-a"}, out: []string{"Quota of namespace team-a removed"}},
		{args: []string{"quota", "delete", "team-a"}, code: exitNotFound},
		{args: []string{"quota", "list"}, out: []string{"No quotas"}},
	} {
		tc.check(t)
	}
}

// TestCLIQueueConfigAndBorrow: weights and borrowing are set with quota
// apply and kept when a limit changes; queue config turns fair share and
// preemption for waiting requests on and shows the figures.
func TestCLIQueueConfigAndBorrow(t *testing.T) {
	apiNode(t)
	for _, tc := range []cliCase{
		{args: []string{"queue", "config"}, out: []string{"Fair share:       off", "Preempt waiting:  false"}},
		{args: []string{"queue", "config", "-fair-share", "-half-life", "1h", "-preempt-waiting"}, out: []string{"Fair share:       on, half-life 1h0m0s", "Preempt waiting:  true"}},
		{args: []string{"queue", "config", "-preempt-waiting=false"}, out: []string{"on, half-life 1h0m0s", "Preempt waiting:  false"}},
		{args: []string{"quota", "apply", "-namespace", "team-a", "-weight", "3"}, out: []string{"team-a", "-", "3", "no"}},
		{args: []string{"quota", "apply", "-namespace", "team-a", "-type", "GPU", "-max-count", "1", "-borrow", "-reclaim-grace", "1m"},
			out: []string{"GPU", "0 of 1", "3", "yes, grace 1m0s"}},
		{args: []string{"quota", "apply", "-namespace", "team-a", "-type", "CPU", "-max-count", "2"}, out: []string{"CPU", "0 of 2", "yes, grace 1m0s"}},
		{args: []string{"alloc", "-namespace", "team-a", "-type", "GPU"}, out: []string{"active"}},
		{args: []string{"queue", "config"}, out: []string{"NAMESPACE", "team-a", "GPU", "3", "1"}},
		{args: []string{"stats", "-namespaces"}, out: []string{"ENTITLED", "team-a", "GPU", "100.0%", "OVER QUOTA"}},
		{args: []string{"stats", "-namespaces", "-pool", "p"}, code: exitUsage},
		{args: []string{"quota", "apply", "-namespace", "team-a", "-weight", "0"}, code: exitUsage},
		{args: []string{"quota", "apply", "-namespace", "team-a"}, code: exitUsage},
		{args: []string{"queue", "config", "-half-life", "-1h"}, code: exitUsage},
	} {
		tc.check(t)
	}
}
