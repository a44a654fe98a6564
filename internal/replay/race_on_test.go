//go:build race

package replay

// raceEnabled is true when the tests run under the race detector, which
// makes a full trace replay take minutes: the numeric checks skip then.
const raceEnabled = true
