//go:build !unix

package fsm

import "time"

// processCPU is not measured here: zero.
func processCPU() time.Duration { return 0 }
