//go:build race

package integration

// raceEnabled is true when the tests run under the race detector, which
// slows this process (a load test's attacker) many times over and runs
// beside every other package's tests: latency targets are checked without
// it.
const raceEnabled = true
