package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client"
)

// runProc is dmsc run started as a process of its own.
type runProc struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{}
	code   int
}

// syncBuffer is a buffer the process writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startRun starts the built dmsc with args in dir, against the API node
// apiNode set up (DMSC_ADDR).
func startRun(t *testing.T, dir string, args ...string) *runProc {
	t.Helper()
	p := &runProc{cmd: exec.Command(buildDMSC(t), args...), stderr: &syncBuffer{}, done: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Stderr = p.stderr
	// A command's own children may keep the stderr pipe open after dmsc
	// run ends: do not wait for them.
	p.cmd.WaitDelay = time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := p.cmd.Wait()
		p.code = exitStatus(err)
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill() //nolint:errcheck
		<-p.done
	})
	return p
}

// wait waits for the process to end and returns its exit status.
func (p *runProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(60 * time.Second):
		t.Fatalf("dmsc run did not end; stderr:\n%s", p.stderr)
		return -1
	}
}

// waitFile polls for a file the command writes and returns its content.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 && bytes.HasSuffix(b, []byte("\n")) {
			return strings.TrimSpace(string(b))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not written", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runClient is an SDK client of the API node.
func runClient(t *testing.T, addr string) *client.Client {
	t.Helper()
	cl, err := client.New(client.Config{Addresses: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// devicesFree checks that the allocation ended as want and its devices
// hold nothing.
func devicesFree(t *testing.T, cl *client.Client, id string, want client.AllocStatus) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, _, err := cl.Allocation(ctx, id, nil)
	if err != nil || a.Status != want {
		t.Fatalf("allocation %s: %+v, %v; want %s", id, a, err, want)
	}
	for _, as := range a.Devices {
		d, _, err := cl.Device(ctx, as.DeviceID, nil)
		if err != nil || len(d.Allocations) != 0 {
			t.Fatalf("device %s still held: %+v, %v", as.DeviceID, d, err)
		}
	}
}

// TestRunEnvAndExitCodes: the command sees its devices and allocation in
// its environment; dmsc run exits with its status (0, 1, and 137 for a
// SIGKILL) and releases the devices.
func TestRunEnvAndExitCodes(t *testing.T) {
	addr := apiNode(t)
	cl := runClient(t, addr)
	for _, tc := range []struct {
		end  string
		code int
	}{{"exit 0", 0}, {"exit 1", 1}, {"kill -9 $$", 137}} {
		t.Run(tc.end, func(t *testing.T) {
			dir := t.TempDir()
			p := startRun(t, dir, "run", "-type", "GPU", "-count", "2", "--", "sh", "-c",
				`echo "$CUDA_VISIBLE_DEVICES|$NVIDIA_VISIBLE_DEVICES|$DMSC_DEVICES|$DMSC_HOSTS|$DMSC_ALLOCATION_ID" > env; `+tc.end)
			if code := p.wait(t); code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.code, p.stderr)
			}
			f := strings.Split(waitFile(t, filepath.Join(dir, "env")), "|")
			if len(f) != 5 || f[0] != "g1,g2" && f[0] != "g2,g1" || f[1] != f[0] || f[2] != f[0] || f[3] != "h1" || f[4] == "" {
				t.Fatalf("environment %q", f)
			}
			devicesFree(t, cl, f[4], client.Released)
		})
	}
}

// TestRunSignals: SIGTERM to dmsc run reaches the command, which exits;
// dmsc run exits with its status and the devices are released.
func TestRunSignals(t *testing.T) {
	addr := apiNode(t)
	cl := runClient(t, addr)
	dir := t.TempDir()
	p := startRun(t, dir, "run", "-type", "GPU", "--", "sh", "-c",
		`trap 'echo term > got; exit 143' TERM; echo "$DMSC_ALLOCATION_ID" > id; while :; do sleep 0.05; done`)
	id := waitFile(t, filepath.Join(dir, "id"))
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 143 {
		t.Fatalf("exit %d, want 143; stderr:\n%s", code, p.stderr)
	}
	if got := waitFile(t, filepath.Join(dir, "got")); got != "term" {
		t.Fatalf("the command got %q", got)
	}
	devicesFree(t, cl, id, client.Released)
}

// TestRunKilled: kill -9 of dmsc run leaves the lease to run out: the
// allocation expires within its TTL and the devices are free.
func TestRunKilled(t *testing.T) {
	addr := apiNode(t)
	cl := runClient(t, addr)
	dir := t.TempDir()
	p := startRun(t, dir, "run", "-ttl", "2s", "-type", "GPU", "--", "sh", "-c",
		`echo "$DMSC_ALLOCATION_ID" > id; sleep 30`)
	id := waitFile(t, filepath.Join(dir, "id"))
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := cl.WatchAllocation(ctx, id, nil, func(a *client.Allocation) bool { return a.Status == client.Active })
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(killed); took > 2*time.Second+time.Second {
		t.Fatalf("the devices were freed %v after the kill, lease 2s", took)
	}
	devicesFree(t, cl, id, client.Expired)
	p.wait(t)
}

// TestRunWaits: with -wait the command starts once another allocation
// releases the devices; stderr says where the request stood.
func TestRunWaits(t *testing.T) {
	addr := apiNode(t)
	cl := runClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	holder, _, err := cl.Allocate(ctx, client.AllocateRequest{Request: client.Request{Claims: []client.Claim{{Type: client.GPU, Count: 2}}}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := startRun(t, dir, "run", "-wait", "-timeout", "30s", "-type", "GPU", "-count", "2", "--", "sh", "-c", `echo "$DMSC_ALLOCATION_ID" > id`)
	for !strings.Contains(p.stderr.String(), "waits in the queue, position 1") {
		select {
		case <-p.done:
			t.Fatalf("dmsc run ended while the devices were held; stderr:\n%s", p.stderr)
		case <-ctx.Done():
			t.Fatalf("no word of the wait; stderr:\n%s", p.stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "id")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the command ran while the devices were held: %v", err)
	}
	if _, _, err := cl.Release(ctx, holder.ID); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr)
	}
	devicesFree(t, cl, waitFile(t, filepath.Join(dir, "id")), client.Released)
}

// TestRunRefused: a request nothing fits exits 3 with the why-not and
// never runs the command.
func TestRunRefused(t *testing.T) {
	addr := apiNode(t)
	cl := runClient(t, addr)
	dir := t.TempDir()
	p := startRun(t, dir, "run", "-type", "GPU", "-count", "5", "--", "sh", "-c", "echo ran > ran")
	if code := p.wait(t); code != exitCapacity || !strings.Contains(p.stderr.String(), "Why not") {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("the command ran")
	}
	_, id, ok := strings.Cut(p.stderr.String(), "kept in the history as allocation ")
	if !ok {
		t.Fatalf("no allocation named; stderr:\n%s", p.stderr)
	}
	devicesFree(t, cl, strings.TrimSuffix(strings.Fields(id)[0], "."), client.Failed)
}

// TestRunHereAndGang: -here takes the devices of the agent's own host; a
// gang over two hosts gets a hostfile.
func TestRunHereAndGang(t *testing.T) {
	addr := apiNode(t) // its agent is node s1; h1 has g1 and g2
	cl := runClient(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, h := range []string{"s1", "h2"} {
		devs := []client.DeviceSpec{
			{ID: h + "-g0", Type: client.GPU, Capabilities: client.Capabilities{Resources: client.Resources{MemoryGB: 80}}},
			{ID: h + "-g1", Type: client.GPU, Capabilities: client.Capabilities{Resources: client.Resources{MemoryGB: 80}}},
		}
		if _, _, err := cl.RegisterHost(ctx, h, client.RegisterHostRequest{Devices: devs}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	p := startRun(t, dir, "run", "-here", "-type", "GPU", "--", "sh", "-c", `echo "$DMSC_HOSTS|$CUDA_VISIBLE_DEVICES" > here`)
	if code := p.wait(t); code != 0 {
		t.Fatalf("-here: exit %d; stderr:\n%s", code, p.stderr)
	}
	if got := waitFile(t, filepath.Join(dir, "here")); got != "s1|s1-g0" && got != "s1|s1-g1" {
		t.Fatalf("-here ran with %q", got)
	}
	p = startRun(t, dir, "run", "-type", "GPU", "-count", "6", "-max-hosts", "3", "--", "sh", "-c",
		`cat "$DMSC_HOSTFILE" > hostfile; echo end >> hostfile`)
	if code := p.wait(t); code != 0 {
		t.Fatalf("gang: exit %d; stderr:\n%s", code, p.stderr)
	}
	if got := waitFile(t, filepath.Join(dir, "hostfile")); got != "h1 slots=2\nh2 slots=2\ns1 slots=2\nend" {
		t.Fatalf("hostfile %q", got)
	}
}
