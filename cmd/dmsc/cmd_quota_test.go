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
