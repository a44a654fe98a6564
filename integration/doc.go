// Package integration tests the real dmsc binary as a cluster of separate
// processes: on 127.0.0.1, forming through -join, leader kills and
// failover time, host loss and return, restarts of the whole cluster, and
// a linearizability check of the allocations under kills, freezes and
// partitions; and, where a Docker engine answers, the container image in
// the docker compose cluster of deploy/. It holds tests only; the harness
// that builds the binary and runs the processes is in harness_test.go.
package integration
