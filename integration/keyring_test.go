package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/client/wire"
)

// dmscCLI runs the dmsc binary as a command (not an agent) and returns
// its standard output; a non-zero exit fails the test.
func dmscCLI(t *testing.T, ctx context.Context, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = agentEnv()
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("dmsc %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, out.String(), errOut.String())
	}
	return out.String()
}

// keygen makes a gossip key with `dmsc operator keygen`.
func keygen(t *testing.T, ctx context.Context) string {
	t.Helper()
	return strings.TrimSpace(dmscCLI(t, ctx, "operator", "keygen"))
}

// outsiderHost prepares a host agent that joins c's servers with its own
// devices and extraArgs (no gossip key unless they give one). It is not
// one of c's hosts; it is killed when the test ends, and its log printed
// if the test failed.
func outsiderHost(t *testing.T, c *Cluster, name string, extraArgs ...string) *Process {
	t.Helper()
	p := newProcess(t, name, false, t.ArtifactDir())
	devices := filepath.Join(t.TempDir(), name+"-devices.json")
	b, err := json.Marshal(DefaultDevices(name))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(devices, b, 0o644); err != nil {
		t.Fatal(err)
	}
	var join []string
	for _, s := range c.Servers {
		join = append(join, s.GossipAddr)
	}
	p.args = append(p.commonArgs(), "-host", "-devices", devices, "-join", strings.Join(join, ","))
	p.args = append(append(p.args, hostFlags...), extraArgs...)
	t.Cleanup(func() {
		if err := p.Kill(); err != nil {
			t.Errorf("killing %s: %v", name, err)
		}
		if t.Failed() {
			t.Logf("---- %s: last lines of %s ----\n%s", name, p.LogPath, tail(p.LogPath, 60))
		}
	})
	return p
}

// logCount counts the lines of a process's log that contain s.
func logCount(p *Process, s string) int {
	b, err := os.ReadFile(p.LogPath)
	if err != nil {
		return 0
	}
	return bytes.Count(b, []byte(s))
}

// TestGossipEncryptionKeepsRoguesOut: in a cluster started with -encrypt,
// a host agent without the key and one with another key try to join
// again and again, and never become members nor register a device.
func TestGossipEncryptionKeepsRoguesOut(t *testing.T) {
	ctx := testContext(t, 90*time.Second)
	key := keygen(t, ctx)
	c := StartCluster(t, Options{Hosts: 1, ServerArgs: []string{"-encrypt", key}, HostArgs: []string{"-encrypt", key}})
	waitInventory(t, ctx, c)

	rogues := []*Process{outsiderHost(t, c, "rogue-nokey"), outsiderHost(t, c, "rogue-otherkey", "-encrypt", keygen(t, ctx))}
	if err := c.Start(rogues...); err != nil {
		t.Fatal(err)
	}
	// Each has tried to join several times, and failed each time.
	err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		for _, r := range rogues {
			if !r.Running() {
				return false, fmt.Errorf("%s exited: %v", r.Name, r.ExitState())
			}
			if logCount(r, "join failed; retrying") < 3 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("waiting for the rogues' join attempts: %v", err)
	}
	leader, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range c.All() {
		var members []wire.Member
		if err := c.Get(ctx, p, "/v1/cluster/members", &members); err != nil {
			t.Fatal(err)
		}
		if len(members) != len(c.All()) {
			t.Errorf("%s sees %d members, want %d: %+v", p.Name, len(members), len(c.All()), members)
		}
		for _, m := range members {
			if strings.HasPrefix(m.ID, "rogue") {
				t.Errorf("%s sees %s as a member: %+v", p.Name, m.ID, m)
			}
		}
	}
	var hosts []wire.Host
	if err := c.Get(ctx, leader, "/v1/hosts?consistent", &hosts); err != nil {
		t.Fatal(err)
	}
	if len(hosts) != 1 || hosts[0].ID != "h1" {
		t.Errorf("hosts %+v, want h1 alone", hosts)
	}
	for _, r := range rogues {
		ds, err := devices(ctx, c, leader, "&host="+r.Name)
		if err != nil || len(ds) != 0 {
			t.Errorf("devices of %s: %v (err %v), want none", r.Name, deviceIDs(ds), err)
		}
		if st, err := c.Status(ctx, r); err != nil || st.Ready {
			t.Errorf("%s is ready (%+v, err %v): it joined someone", r.Name, st, err)
		}
	}
}

// loader allocates and releases a GPU through the SDK in a loop until
// stopped, counting the rounds and keeping every error.
type loader struct {
	rounds atomic.Int64
	mu     sync.Mutex
	errs   []error
	stop   context.CancelFunc
	done   chan struct{}
}

func startLoader(t *testing.T, ctx context.Context, c *Cluster) *loader {
	var addrs []string
	for _, s := range c.Servers {
		addrs = append(addrs, "http://"+s.HTTPAddr)
	}
	cl, err := client.New(client.Config{Addresses: addrs})
	if err != nil {
		t.Fatal(err)
	}
	lctx, stop := context.WithCancel(ctx)
	l := &loader{stop: stop, done: make(chan struct{})}
	fail := func(err error) {
		l.mu.Lock()
		l.errs = append(l.errs, err)
		l.mu.Unlock()
	}
	go func() {
		defer close(l.done)
		for i := 0; lctx.Err() == nil; i++ {
			octx, cancel := context.WithTimeout(ctx, 15*time.Second)
			a, _, err := cl.Allocate(octx, client.AllocateRequest{
				Request:   client.Request{Claims: []client.Claim{{Type: client.GPU, Count: 1}}},
				RequestID: fmt.Sprintf("keyring-load-%d", i),
			})
			if err == nil && a.Status != client.Active {
				err = fmt.Errorf("allocation %d is %s", i, a.Status)
			}
			if err == nil {
				_, _, err = cl.Release(octx, a.ID)
			}
			cancel()
			if err != nil {
				fail(fmt.Errorf("round %d: %w", i, err))
				continue
			}
			l.rounds.Add(1)
		}
	}()
	t.Cleanup(func() { l.stop(); <-l.done })
	return l
}

// progress waits until the loader has made n more rounds.
func (l *loader) progress(t *testing.T, ctx context.Context, n int64) {
	t.Helper()
	want := l.rounds.Load() + n
	if err := poll(ctx, 20*time.Millisecond, func() (bool, error) { return l.rounds.Load() >= want, nil }); err != nil {
		t.Fatalf("the client made %d of %d rounds: %v", l.rounds.Load(), want, err)
	}
}

// end stops the loader and returns its errors.
func (l *loader) end() []error {
	l.stop()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.errs
}

// keyringLister lists the cluster's keyring through p's API with one SDK
// client, so that polling reuses its connections (a client a call would
// leave an idle connection each, up to the node's per-address limit).
func keyringLister(t *testing.T, p *Process) func(ctx context.Context) *client.KeyringResponse {
	t.Helper()
	cl, err := client.New(client.Config{Addresses: []string{"http://" + p.HTTPAddr}})
	if err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context) *client.KeyringResponse {
		t.Helper()
		res, err := cl.KeyringList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
}

// TestKeyringRotationUnderLoad rotates the gossip key of a running
// cluster with `dmsc operator keyring` (install, use, remove) while a
// client keeps allocating through the SDK: no request fails. A server and
// the host restarted afterwards with the old key still on their command
// lines come back on the keyring they stored.
func TestKeyringRotationUnderLoad(t *testing.T) {
	ctx := testContext(t, 120*time.Second)
	old, next := keygen(t, ctx), keygen(t, ctx)
	hostKeyring := filepath.Join(t.TempDir(), "h1.keyring")
	c := StartCluster(t, Options{Hosts: 1,
		ServerArgs: []string{"-encrypt", old},
		HostArgs:   []string{"-encrypt", old, "-keyring-file", hostKeyring}})
	waitInventory(t, ctx, c)
	var addrs []string
	for _, s := range c.Servers {
		addrs = append(addrs, "http://"+s.HTTPAddr)
	}
	keyring := func(args ...string) string {
		return dmscCLI(t, ctx, append([]string{"operator", "keyring", "-address", strings.Join(addrs, ",")}, args...)...)
	}

	load := startLoader(t, ctx, c)
	load.progress(t, ctx, 5)
	if out := keyring("-list"); !strings.Contains(out, old+"  4/4        4/4") {
		t.Fatalf("list before the rotation:\n%s", out)
	}
	for _, step := range [][]string{{"-install", next}, {"-use", next}, {"-remove", old}} {
		out := keyring(step...)
		if !strings.Contains(out, "on 4 of 4 members") {
			t.Fatalf("keyring %s:\n%s", strings.Join(step, " "), out)
		}
		load.progress(t, ctx, 5)
	}
	if errs := load.end(); len(errs) > 0 {
		t.Fatalf("%d requests failed during the rotation (of %d rounds), first: %v", len(errs), load.rounds.Load(), errs[0])
	}
	t.Logf("%d allocate-release rounds during the rotation, none failed", load.rounds.Load())
	res := keyringLister(t, c.Servers[0])(ctx)
	if res.Members != 4 || len(res.Keys) != 1 || res.Keys[0] != (client.KeyringKey{Key: next, Installed: 4, Primary: 4}) {
		t.Fatalf("after the rotation: %+v", res)
	}

	// Restart a server and the host with the same command lines (the old
	// key): the stored keyring wins and they rejoin.
	s := c.Servers[1]
	h := c.Process("h1")
	if err := c.Stop(s, h); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(s, h); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitReady(ctx, s, h); err != nil {
		t.Fatal(err)
	}
	waitInventory(t, ctx, c)
	for _, p := range []*Process{s, h} {
		if logCount(p, "using the gossip keyring stored in the keyring file") != 1 {
			t.Errorf("%s did not log that its stored keyring won over -encrypt", p.Name)
		}
	}
	// A node on a stale key would see only the nodes on that key.
	rejoin, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	list := keyringLister(t, s)
	err := poll(rejoin, 50*time.Millisecond, func() (bool, error) {
		res = list(ctx)
		return res.Members == 4 && len(res.Failed) == 0, nil
	})
	if err != nil || len(res.Keys) != 1 || res.Keys[0] != (client.KeyringKey{Key: next, Installed: 4, Primary: 4}) {
		t.Fatalf("after the restarts: %+v (%v)", res, err)
	}
	allocate(t, ctx, c, c.Servers, gpuRequest("after-restart", 1, "h1"))
}
