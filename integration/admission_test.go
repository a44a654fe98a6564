package integration

// Rogue servers against a secured cluster (TLS and gossip encryption on),
// the attack of issue 11 that made three unknown `dmsc agent -server`
// processes voters within 10 s: without the gossip key they are never
// members; with the key but without a server's certificate they are
// members of the gossip pool but never enter the Raft configuration. A
// new server with the key and its own server certificate is admitted
// (a non-voter, then a voter after the stabilization time), so the
// refusals are the credentials' doing; remove-peer keeps it out while it
// runs, and readmit lets it back.

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/internal/certs"
)

// securedCluster starts a cluster with TLS and gossip encryption on (3
// servers, 1 host) and waits until the host's devices are registered. It
// returns the cluster and its gossip key.
func securedCluster(t *testing.T, ctx context.Context, serverArgs ...string) (*Cluster, string) {
	t.Helper()
	key := keygen(t, ctx)
	c := StartCluster(t, Options{TLS: true, Hosts: 1,
		ServerArgs: append([]string{"-encrypt", key}, serverArgs...),
		HostArgs:   []string{"-encrypt", key}})
	waitInventory(t, ctx, c)
	return c, key
}

// settledIndexes waits until every server's state index is the same (each
// has applied the last change) and returns them, as stateIndexes.
func settledIndexes(t *testing.T, ctx context.Context, c *Cluster) []string {
	t.Helper()
	var last []string
	err := poll(ctx, 20*time.Millisecond, func() (bool, error) {
		var err error
		if last, err = stateIndexes(ctx, c); err != nil {
			return false, err
		}
		_, first, _ := strings.Cut(last[0], "=")
		for _, s := range last {
			if _, i, _ := strings.Cut(s, "="); i != first {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the servers' state indexes do not meet: %v (%v)", last, err)
	}
	return last
}

// outsiderServer prepares a server agent that is not one of c's: the
// command line of issue 11, `dmsc agent -server -bootstrap-expect 3
// -join <s1's gossip address>`, with the harness's server timings and
// extraArgs (no gossip key and no certificate unless they give them). It
// is killed when the test ends, and its log printed if the test failed.
func outsiderServer(t *testing.T, c *Cluster, name string, extraArgs ...string) *Process {
	t.Helper()
	p := newProcess(t, name, true, t.ArtifactDir())
	p.DataDir = filepath.Join(t.TempDir(), name)
	p.args = append(p.commonArgs(), "-server", "-bootstrap-expect", "3", "-data-dir", p.DataDir,
		"-join", c.Servers[0].GossipAddr)
	p.args = append(append(p.args, serverFlags...), extraArgs...)
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

// rogueServerNode is a server in this process that joins c's gossip with
// key and presents the certificate store tlsStore: what a modified binary
// would do, since the agent refuses to start with a certificate that is
// not a server's for its own name.
func rogueServerNode(t *testing.T, c *Cluster, id, key string, tlsStore *certs.Store) *cluster.Node {
	t.Helper()
	k, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		t.Fatal(err)
	}
	n, err := cluster.New(cluster.Config{
		NodeID: id, BindAddr: "127.0.0.1", Server: true, BootstrapExpect: 3,
		Join: []string{c.Servers[0].GossipAddr}, RetryJoinInterval: 200 * time.Millisecond,
		GossipProbeInterval: 200 * time.Millisecond, GossipSuspicionMult: 2,
		EncryptKey: k, TLS: tlsStore, Logger: hclog.NewNullLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
	})
	return n
}

// membership is what a Raft configuration says of who votes: its index
// and each server with its address and suffrage (not who leads, which an
// election may change without any server joining).
func membership(rcs map[string]wire.RaftConfiguration) map[string]string {
	out := map[string]string{}
	for name, rc := range rcs {
		var servers []string
		for _, s := range rc.Servers {
			servers = append(servers, fmt.Sprintf("%s@%s(%s)", s.ID, s.Address, suffrageOf(rc, s.ID)))
		}
		slices.Sort(servers)
		out[name] = fmt.Sprintf("index %d: %s", rc.Index, strings.Join(servers, " "))
	}
	return out
}

// raftConfigs is every server's Raft configuration, as it reports it.
func raftConfigs(ctx context.Context, c *Cluster) (map[string]wire.RaftConfiguration, error) {
	out := map[string]wire.RaftConfiguration{}
	for _, p := range c.Servers {
		if !p.Running() {
			continue
		}
		var rc wire.RaftConfiguration
		if err := c.Get(ctx, p, "/v1/cluster/raft", &rc); err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		out[p.Name] = rc
	}
	return out, nil
}

// suffrageOf is id's place in rc: "voter", "non-voter" or "" (absent).
func suffrageOf(rc wire.RaftConfiguration, id string) string {
	for _, s := range rc.Servers {
		if s.ID == id {
			if s.Voter {
				return "voter"
			}
			return "non-voter"
		}
	}
	return ""
}

// members is the gossip members p sees, each with its status (alive,
// failed or left).
func members(ctx context.Context, c *Cluster, p *Process) (map[string]string, error) {
	var ms []wire.Member
	if err := c.Get(ctx, p, "/v1/cluster/members", &ms); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range ms {
		out[m.ID] = m.Status
	}
	return out, nil
}

// checkOutOfRaft fails the test when any server's Raft configuration
// names one of ids.
func checkOutOfRaft(t *testing.T, ctx context.Context, c *Cluster, ids []string) {
	t.Helper()
	rcs, err := raftConfigs(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	for name, rc := range rcs {
		for _, id := range ids {
			if s := suffrageOf(rc, id); s != "" {
				t.Fatalf("%s has %s in its Raft configuration as a %s: %+v", name, id, s, rc.Servers)
			}
		}
	}
}

// logMark is where each process's log ended at some moment, so that
// what was logged since can be read.
type logMark map[*Process]int64

// markLogs marks the end of the logs of ps.
func markLogs(ps ...*Process) logMark {
	m := logMark{}
	for _, p := range ps {
		if fi, err := os.Stat(p.LogPath); err == nil {
			m[p] = fi.Size()
		}
	}
	return m
}

// scan calls f with each line p logged since the mark (every line, for a
// process not marked) that contains every one of subs.
func (m logMark) scan(p *Process, f func(line string), subs ...string) {
	file, err := os.Open(p.LogPath)
	if err != nil {
		return
	}
	defer file.Close()
	if _, err := file.Seek(m[p], io.SeekStart); err != nil {
		return
	}
	sc := bufio.NewScanner(file)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
next:
	for sc.Scan() {
		for _, s := range subs {
			if !strings.Contains(sc.Text(), s) {
				continue next
			}
		}
		f(sc.Text())
	}
}

// count is how many lines the processes ps logged since the mark that
// contain every one of subs.
func (m logMark) count(ps []*Process, subs ...string) int {
	n := 0
	for _, p := range ps {
		m.scan(p, func(string) { n++ }, subs...)
	}
	return n
}

// times are the times of the earliest and the latest lines of ps since the
// mark that contain every one of subs (an agent's lines begin with an
// RFC 3339 time in milliseconds).
func (m logMark) times(ps []*Process, subs ...string) (first, last time.Time) {
	for _, p := range ps {
		m.scan(p, func(line string) {
			stamp, _, _ := strings.Cut(line, " ")
			at, err := time.Parse("2006-01-02T15:04:05.000Z0700", stamp)
			if err != nil {
				return
			}
			if first.IsZero() || at.Before(first) {
				first = at
			}
			if at.After(last) {
				last = at
			}
		}, subs...)
	}
	return first, last
}

// TestRogueServersWithoutGossipKey: three `dmsc agent -server
// -bootstrap-expect 3 -join <s1>` processes without the gossip key and
// without any certificate, against a cluster with TLS and gossip
// encryption on, try to join again and again: they never become members
// (no server sees them), never enter the Raft configuration, and the
// state index does not move; the cluster keeps serving writes.
func TestRogueServersWithoutGossipKey(t *testing.T) {
	ctx := testContext(t, 90*time.Second)
	c, _ := securedCluster(t, ctx)
	before := settledIndexes(t, ctx, c)
	rcBefore, err := raftConfigs(ctx, c)
	if err != nil {
		t.Fatal(err)
	}

	var rogues []*Process
	var ids []string
	for i := range 3 {
		r := outsiderServer(t, c, fmt.Sprintf("rogue%d", i+1))
		rogues, ids = append(rogues, r), append(ids, r.Name)
	}
	if err := c.Start(rogues...); err != nil {
		t.Fatal(err)
	}
	// Until each rogue has failed to join three times (its retries are
	// 200 ms apart), no server may see it nor have it in Raft.
	err = poll(ctx, 50*time.Millisecond, func() (bool, error) {
		for _, p := range c.Servers {
			ms, err := members(ctx, c, p)
			if err != nil {
				return false, err
			}
			for _, id := range ids {
				if st, ok := ms[id]; ok {
					return false, fmt.Errorf("%s sees %s in gossip (%s): %v", p.Name, id, st, ms)
				}
			}
		}
		checkOutOfRaft(t, ctx, c, ids)
		for _, r := range rogues {
			if !r.Running() {
				return false, fmt.Errorf("%s exited: %v", r.Name, r.ExitState())
			}
			if (logMark{}).count([]*Process{r}, "join failed; retrying") < 3 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("while the rogues tried to join: %v", err)
	}
	for _, r := range rogues {
		if st, err := c.Status(ctx, r); err != nil || st.Ready || st.Leader != "" {
			t.Errorf("%s: %+v (err %v): it should know no cluster", r.Name, st, err)
		}
	}

	after, err := stateIndexes(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before, after) {
		t.Fatalf("the state index moved: %v, then %v", before, after)
	}
	rcAfter, err := raftConfigs(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if b, a := membership(rcBefore), membership(rcAfter); !maps.Equal(b, a) {
		t.Fatalf("the Raft configuration changed: %v, then %v", b, a)
	}
	// The cluster still serves writes, with the rogues still trying.
	a := allocate(t, ctx, c, c.Servers, gpuRequest("after-rogues", 1, "h1"))
	release(t, ctx, c, c.Servers, a.ID)
}

// TestRogueServersWithoutServerCertificate: against a cluster with TLS
// and gossip encryption on, rogue servers that hold the gossip key but no
// server certificate of their own name join the gossip pool (the key
// lets them) and are asked by the leader who they are; none is admitted
// into the Raft configuration, and the state index does not move. The
// rogues: three `dmsc agent -server -bootstrap-expect 3 -join <s1>`
// processes with the key and no certificate (the agent does not start as
// a server with a host's or a client's certificate: checked), and three
// servers in this process, as a modified binary would run, presenting a
// host's certificate, a client's, and another server's (s9's).
//
// Then the control: a server s4 with the key and its own server
// certificate, started the same way, is admitted as a non-voter and made
// a voter no sooner than the stabilization time after. remove-peer takes
// it out and keeps it out while it runs (reconcile, every 200 ms, would
// otherwise add it back); readmit lets it in again through the same
// admission.
func TestRogueServersWithoutServerCertificate(t *testing.T) {
	const stabilization = 3 * time.Second
	ctx := testContext(t, 150*time.Second)
	c, key := securedCluster(t, ctx, "-server-stabilization-time", stabilization.String())

	// The agent refuses to run as a server with a host's or a client's
	// certificate.
	for _, cert := range []certs.Files{c.PKI.Cert(certs.Host, "rogue-host"), c.PKI.Cert(certs.Client, "")} {
		args := append([]string{"agent", "-server", "-node", "rogue-host", "-bootstrap-expect", "3",
			"-data-dir", t.TempDir(), "-join", c.Servers[0].GossipAddr, "-encrypt", key}, TLSArgs(cert)...)
		cmd := exec.CommandContext(ctx, binary, args...)
		cmd.Env = agentEnv()
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(string(out), "but this node is server") {
			t.Fatalf("agent -server with %s: %v\n%s", cert.Cert, err, out)
		}
	}

	before := settledIndexes(t, ctx, c)
	rcBefore, err := raftConfigs(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var rogues []*Process
	var ids []string
	for i := range 3 {
		r := outsiderServer(t, c, fmt.Sprintf("rogue%d", i+1), "-encrypt", key)
		rogues, ids = append(rogues, r), append(ids, r.Name)
	}
	if err := c.Start(rogues...); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		id    string
		store *certs.Store
	}{
		{"rogue-hostcert", c.PKI.Store(certs.Host, "rogue-hostcert")},
		{"rogue-clientcert", c.PKI.Store(certs.Client, "")},
		{"rogue-s9cert", c.PKI.Store(certs.Server, "s9")},
	} {
		rogueServerNode(t, c, r.id, key, r.store)
		ids = append(ids, r.id)
	}

	// Every server sees every rogue in gossip, and the leader refuses
	// each of them three times (reconcile runs every 200 ms); until
	// then, and after, none is in any Raft configuration.
	err = poll(ctx, 50*time.Millisecond, func() (bool, error) {
		checkOutOfRaft(t, ctx, c, ids)
		for _, r := range rogues {
			if !r.Running() {
				return false, fmt.Errorf("%s exited: %v", r.Name, r.ExitState())
			}
		}
		for _, p := range c.Servers {
			ms, err := members(ctx, c, p)
			if err != nil {
				return false, err
			}
			for _, id := range ids {
				if ms[id] != "alive" {
					return false, nil
				}
			}
		}
		for _, id := range ids {
			if (logMark{}).count(c.Servers, "not admitting server", "id="+id+" ") < 3 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("waiting for the leader to refuse the rogues: %v", err)
	}
	checkOutOfRaft(t, ctx, c, ids)
	after, err := stateIndexes(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(before, after) {
		t.Fatalf("the state index moved: %v, then %v", before, after)
	}
	rcAfter, err := raftConfigs(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if b, a := membership(rcBefore), membership(rcAfter); !maps.Equal(b, a) {
		t.Fatalf("the Raft configuration changed: %v, then %v", b, a)
	}
	a := allocate(t, ctx, c, c.Servers, gpuRequest("after-rogues", 1, "h1"))
	release(t, ctx, c, c.Servers, a.ID)

	// The control: s4, with the key and its own server certificate.
	s4 := outsiderServer(t, c, "s4", append([]string{"-encrypt", key}, c.PKI.AgentArgs("s4", true)...)...)
	s4.tlsArgs = c.PKI.AgentArgs("s4", true)
	// admitted waits until the leader has s4 as a non-voter, then as a
	// voter, and checks from the servers' logs since mark that the
	// promotion came no sooner than the stabilization time after the
	// admission.
	admitted := func(what string, mark logMark) {
		t.Helper()
		sawNonVoter := false
		err := poll(ctx, 20*time.Millisecond, func() (bool, error) {
			leader, err := c.Leader(ctx)
			if err != nil {
				return false, err
			}
			var rc wire.RaftConfiguration
			if err := c.Get(ctx, leader, "/v1/cluster/raft", &rc); err != nil {
				return false, err
			}
			switch suffrageOf(rc, "s4") {
			case "non-voter":
				sawNonVoter = true
			case "voter":
				return true, nil
			}
			return false, nil
		})
		if err != nil || !sawNonVoter {
			t.Fatalf("%s: s4 a non-voter (seen: %v), then a voter: %v", what, sawNonVoter, err)
		}
		admittedAt, _ := mark.times(c.Servers, "admitting server as a non-voter", "id=s4 ")
		_, promotedAt := mark.times(c.Servers, "promoting stable server to voter", "id=s4 ")
		if admittedAt.IsZero() || promotedAt.IsZero() {
			t.Fatalf("%s: the servers' logs do not show s4's admission (%v) and promotion (%v)", what, admittedAt, promotedAt)
		}
		d := promotedAt.Sub(admittedAt)
		if d < stabilization {
			t.Fatalf("%s: s4 was promoted %v after its admission, before the stabilization time %v", what, d, stabilization)
		}
		t.Logf("%s: s4 admitted as a non-voter, promoted %v later", what, d)
		if err := c.WaitReady(ctx, s4); err != nil {
			t.Fatal(err)
		}
		checkOutOfRaft(t, ctx, c, ids)
	}
	mark := markLogs(c.Servers...)
	if err := c.Start(s4); err != nil {
		t.Fatal(err)
	}
	admitted("first admission", mark)

	// remove-peer, with the CLI over HTTPS: s4 leaves the configuration
	// and stays out while it runs.
	client := c.PKI.Cert(certs.Client, "")
	operator := func(args ...string) string {
		return dmscCLI(t, ctx, "operator", "raft", args[0], "-address", "https://"+c.Servers[0].HTTPAddr,
			"-ca-cert", client.CA, "-client-cert", client.Cert, "-client-key", client.Key, args[1])
	}
	if out := operator("remove-peer", "s4"); !strings.Contains(out, "Removed server s4") {
		t.Fatalf("remove-peer:\n%s", out)
	}
	err = poll(ctx, 20*time.Millisecond, func() (bool, error) {
		rcs, err := raftConfigs(ctx, c)
		if err != nil {
			return false, err
		}
		for _, rc := range rcs {
			if suffrageOf(rc, "s4") != "" {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("s4 still in the configuration after remove-peer: %v", err)
	}
	indexRemoved := settledIndexes(t, ctx, c)
	// s4 runs on and every server sees it alive in gossip ...
	s4Alive := func() {
		t.Helper()
		err := poll(ctx, 20*time.Millisecond, func() (bool, error) {
			if !s4.Running() {
				return false, fmt.Errorf("s4 exited: %v", s4.ExitState())
			}
			for _, p := range c.Servers {
				ms, err := members(ctx, c, p)
				if err != nil || ms["s4"] != "alive" {
					return false, err
				}
			}
			return true, nil
		})
		if err != nil {
			t.Fatalf("s4 alive in every server's gossip: %v", err)
		}
	}
	s4Alive()
	// ... and, for a stated interval of 3 s (15 reconcile rounds of the
	// leader), is not added back.
	mark = markLogs(c.Servers...)
	for watch := time.Now().Add(3 * time.Second); time.Now().Before(watch); time.Sleep(100 * time.Millisecond) {
		checkOutOfRaft(t, ctx, c, []string{"s4"})
	}
	s4Alive()
	checkOutOfRaft(t, ctx, c, []string{"s4"})
	if n := mark.count(c.Servers, "admitting server as a non-voter", "id=s4 "); n > 0 {
		t.Fatalf("a leader admitted s4 %d times while it was removed", n)
	}
	if now, err := stateIndexes(ctx, c); err != nil || !slices.Equal(now, indexRemoved) {
		t.Fatalf("the state index moved while s4 was out: %v, then %v (%v)", indexRemoved, now, err)
	}

	// readmit: s4 comes back through the same admission.
	mark = markLogs(c.Servers...)
	if out := operator("readmit", "s4"); !strings.Contains(out, "Readmitted server s4") {
		t.Fatalf("readmit:\n%s", out)
	}
	admitted("readmission", mark)
}
