package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestDataDirLocked starts a second node on a data directory in use: it
// fails at once, naming the directory; once the first stops, the data
// directory can be used again.
func TestDataDirLocked(t *testing.T) {
	dir := t.TempDir()
	cfg := func(id string) Config {
		return Config{NodeID: id, DataDir: dir, Server: true, BootstrapExpect: 1, Logger: testLogger(t)}
	}
	first, err := New(cfg("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Start(ctxT(t, 10*time.Second)); err != nil {
		t.Fatal(err)
	}
	second, err := New(cfg("b"))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = second.Start(ctxT(t, 10*time.Second))
	if !errors.Is(err, ErrDataDirInUse) || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), dir) {
		t.Fatalf("second start: %v, want ErrDataDirInUse naming %s", err, dir)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("second start took %v", d)
	}
	if err := first.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	third, err := New(cfg("a"))
	if err != nil {
		t.Fatal(err)
	}
	if err := third.Start(ctxT(t, 10*time.Second)); err != nil {
		t.Fatalf("start after the first stopped: %v", err)
	}
	if err := third.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
