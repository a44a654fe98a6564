package main

import (
	"os"
	"runtime"
	"runtime/pprof"
)

// startCPUProfile starts a CPU profile of this process into path; stop
// ends it and closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// writeHeapProfile writes a heap profile of this process to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// debugProfileEnv, set to anything in an agent's environment while
// enable_debug is on, also records block and mutex contention for
// /debug/pprof/block and /debug/pprof/mutex (`dmsc bench -profile` sets
// it on the agents it spawns). Off by default: it costs a little on every
// contended lock and channel.
const debugProfileEnv = "DMSC_DEBUG_CONTENTION_PROFILE"

// blockProfileRate samples one blocking event per this many nanoseconds
// blocked; mutexProfileFraction one contended lock in this many.
const (
	blockProfileRate     = 10_000
	mutexProfileFraction = 10
)

// profileContention turns block and mutex profiling on when debugProfileEnv
// asks for it and the agent serves the profiles.
func profileContention(enableDebug bool) {
	if !enableDebug || os.Getenv(debugProfileEnv) == "" {
		return
	}
	runtime.SetBlockProfileRate(blockProfileRate)
	runtime.SetMutexProfileFraction(mutexProfileFraction)
}
