package main

import (
	"os"
	"runtime/debug"
)

// agentGCPercent is the garbage collector's target of a process that runs
// servers (the agent, and bench with -local): the heap may grow to 5 times
// the live data before a collection, instead of Go's default of 2. A
// server's live heap is the scheduler state plus the Raft log cache, tens
// of MB for thousands of devices, while the write path allocates a great
// deal of short-lived garbage (JSON, HTTP, log entries). The cluster load
// benchmark measured 10 % less CPU per operation and about 20 % more
// operations per second than with GOGC=100 (BENCHMARKS.md, "Cluster
// load"). GOGC in the environment overrides it (GOGC=100 is Go's default);
// GOMEMLIMIT caps the heap as usual.
const agentGCPercent = 400

// tuneGC applies agentGCPercent unless GOGC is set.
func tuneGC() {
	if _, set := os.LookupEnv("GOGC"); set {
		return
	}
	debug.SetGCPercent(agentGCPercent)
}
