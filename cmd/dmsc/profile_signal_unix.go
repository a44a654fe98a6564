//go:build unix

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// heapProfilesOnSignal writes a heap profile to path.1, path.2, ... each
// time the process gets SIGUSR1, until ctx ends: the profile of a process
// that is in trouble now, not only of one that reached its end.
func heapProfilesOnSignal(ctx context.Context, path string, log hclog.Logger) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR1)
	go func() {
		defer signal.Stop(ch)
		for k := 1; ; k++ {
			select {
			case <-ctx.Done():
				return
			case <-ch:
			}
			p := fmt.Sprintf("%s.%d", path, k)
			if err := writeHeapProfile(p); err != nil {
				log.Error("heap profile", "path", p, "error", err)
				continue
			}
			log.Warn("heap profile written", "path", p, "goroutines", runtime.NumGoroutine())
		}
	}()
}
