//go:build unix

package fsm

import (
	"syscall"
	"time"
)

// processCPU is the CPU time this process has used (user and system, all
// threads): on a machine shared with other work a benchmark's CPU time
// says what it costs when its wall time says mostly how busy the machine
// was.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
