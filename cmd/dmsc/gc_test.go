package main

import (
	"os"
	"runtime/debug"
	"testing"
)

func TestTuneGC(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)

	t.Setenv("GOGC", "") // restored at the end
	if err := os.Unsetenv("GOGC"); err != nil {
		t.Fatal(err)
	}
	tuneGC()
	if got := debug.SetGCPercent(100); got != agentGCPercent {
		t.Errorf("without GOGC: GC percent %d, want %d", got, agentGCPercent)
	}

	t.Setenv("GOGC", "100")
	tuneGC()
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("with GOGC=100: GC percent %d, want 100 (left as the environment says)", got)
	}
}
