//go:build unix

package main

import (
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// TestHeapProfileOnSignal checks that SIGUSR1 writes the next numbered
// heap profile.
func TestHeapProfileOnSignal(t *testing.T) {
	path := t.TempDir() + "/heap"
	heapProfilesOnSignal(t.Context(), path, hclog.NewNullLogger())
	for k, want := range []string{path + ".1", path + ".2"} {
		if err := syscall.Kill(os.Getpid(), syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if st, err := os.Stat(want); err == nil && st.Size() > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("signal %d: no heap profile at %s", k+1, want)
			}
		}
	}
}
