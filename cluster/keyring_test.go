package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/dmsc/dmsc/fsm"
)

// newKey returns a fresh gossip key, raw and in base64.
func newKey(t testing.TB) ([]byte, string) {
	t.Helper()
	s, err := GenerateGossipKey()
	if err != nil {
		t.Fatal(err)
	}
	k, err := DecodeGossipKey(s)
	if err != nil || len(k) != GossipKeySize {
		t.Fatalf("generated key %q: %d bytes, %v", s, len(k), err)
	}
	return k, s
}

// joinFailures counts a node's failed join attempts from its log.
type joinFailures struct{ n atomic.Int64 }

func (j *joinFailures) Write(p []byte) (int, error) {
	j.n.Add(int64(bytes.Count(p, []byte("join failed; retrying"))))
	return len(p), nil
}

// outsider starts a node that is not given the cluster's key (key nil: no
// encryption at all) and returns it with the count of its failed joins.
func outsider(tc *testCluster, id string, server bool, key []byte) (*Node, *joinFailures) {
	tc.t.Helper()
	cfg := tc.fastConfig(id, server)
	cfg.EncryptKey = key
	jf := &joinFailures{}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: jf, Level: hclog.Warn})
	if !server {
		cfg.Inventory = (&inventory{devices: []fsm.DeviceSpec{gpu(id+"-gpu", 80)}}).get
	}
	return tc.start(cfg), jf
}

// waitRefused waits until each outsider has tried to join at least twice
// and failed every time.
func waitRefused(t testing.TB, outsiders map[*Node]*joinFailures) {
	t.Helper()
	poll(t, 15*time.Second, "outsiders refused twice", func() error {
		for n, jf := range outsiders {
			if jf.n.Load() < 2 {
				return fmt.Errorf("%s failed %d joins", n.cfg.NodeID, jf.n.Load())
			}
		}
		return nil
	})
}

// checkUnseen fails the test when any of nodes lists one of ids as a
// member, when the servers' Raft configuration or state holds one, or
// when an outsider sees anyone but itself.
func checkUnseen(t testing.TB, nodes []*Node, outsiders []*Node) {
	t.Helper()
	for _, o := range outsiders {
		id := o.cfg.NodeID
		for _, n := range nodes {
			for _, m := range n.Members() {
				if m.ID == id {
					t.Errorf("%s sees outsider %s: %+v", n.cfg.NodeID, id, m)
				}
			}
			if n.raft == nil {
				continue
			}
			if _, _, ok := hostView(t, n, id); ok {
				t.Errorf("outsider %s is registered as a host on %s", id, n.cfg.NodeID)
			}
			rc, err := n.RaftConfiguration()
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range rc.Servers {
				if s.ID == id {
					t.Errorf("outsider %s is in the Raft configuration of %s", id, n.cfg.NodeID)
				}
			}
		}
		if got := o.Members(); len(got) != 1 || got[0].ID != id {
			t.Errorf("outsider %s sees %+v", id, got)
		}
	}
}

// TestGossipKeyKeepsOutsidersOut: a cluster with a gossip key forms and
// registers its host; nodes without the key, or with another key, are
// neither seen nor registered, while a host with the key that starts
// after them is.
func TestGossipKeyKeepsOutsidersOut(t *testing.T) {
	k1, _ := newKey(t)
	k2, _ := newKey(t)
	tc := newTestCluster(t, func(c *Config) { c.EncryptKey = k1 })
	servers := tc.servers(3)
	leader := tc.waitLeader(servers...)

	noKey, jf1 := outsider(tc, "rogue-nokey", false, nil)
	otherKey, jf2 := outsider(tc, "rogue-otherkey", false, k2)
	rogueServer, jf3 := outsider(tc, "rogue-server", true, nil)

	hc := tc.fastConfig("h1", false)
	hc.Inventory = (&inventory{devices: []fsm.DeviceSpec{gpu("h1-gpu", 80)}}).get
	host := tc.start(hc)
	waitHost(t, leader, "h1", true, 1, fsm.Available)
	waitRefused(t, map[*Node]*joinFailures{noKey: jf1, otherKey: jf2, rogueServer: jf3})

	checkUnseen(t, append(slices.Clone(servers), host), []*Node{noKey, otherKey, rogueServer})
	if got := len(leader.Members()); got != 4 {
		t.Errorf("the leader sees %d members, want 4: %+v", got, leader.Members())
	}
}

// keyringFile reads a node's keyring file as base64 keys.
func keyringFile(t testing.TB, n *Node) []string {
	t.Helper()
	keys, err := readKeyringFile(n.cfg.keyringPath())
	if err != nil {
		t.Fatal(err)
	}
	return encodeKeys(keys)
}

// wantKeys checks a keyring result: members, no failure, and each key
// with its installed and primary counts, in order.
func wantKeys(t testing.TB, what string, res KeyringResult, members int, keys ...KeyringKey) {
	t.Helper()
	if res.Members != members || len(res.Failed) != 0 || !slices.Equal(res.Keys, keys) {
		t.Fatalf("%s: %+v, want %d members, keys %+v", what, res, members, keys)
	}
}

// waitMembersAlive waits until n's gossip sees want members alive: a
// keyring list asks the members its node sees.
func waitMembersAlive(t testing.TB, n *Node, want int) {
	t.Helper()
	poll(t, 10*time.Second, "every member alive in "+n.cfg.NodeID+"'s gossip", func() error {
		alive := 0
		for _, m := range n.Members() {
			if m.Status == MemberAlive {
				alive++
			}
		}
		if alive != want {
			return fmt.Errorf("%d members alive, want %d", alive, want)
		}
		return nil
	})
}

// TestKeyringRotation installs a new key, makes it primary and removes
// the old one across three servers and a host, with the refusals on the
// way; the cluster keeps working, a node with only the old key stays out,
// and nodes restarted with the stale key on their command line come back
// with the keyring they persisted.
func TestKeyringRotation(t *testing.T) {
	k1, s1 := newKey(t)
	_, s2 := newKey(t)
	tc := newTestCluster(t, func(c *Config) { c.EncryptKey = k1 })
	servers := tc.servers(3)
	leader := tc.waitLeader(servers...)
	hc := tc.fastConfig("h1", false)
	hc.Inventory = (&inventory{devices: []fsm.DeviceSpec{gpu("h1-gpu", 80)}}).get
	host := tc.start(hc)
	waitHost(t, leader, "h1", true, 1, fsm.Available)
	follower := followers(leader, servers...)[0]
	ctx := ctxT(t, time.Minute)
	// The host is registered through the leader; the follower's list asks
	// the members its own gossip sees, which may not hold the host yet.
	waitMembersAlive(t, follower, 4)

	res, err := follower.Keyring(ctx, KeyringList, "")
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "list", res, 4, KeyringKey{Key: s1, Installed: 4, Primary: 4})

	// Refusals change nothing.
	for _, c := range []struct {
		op   KeyringOp
		key  string
		code string
		msg  string
	}{
		{KeyringUse, s2, fsm.ErrConflict.Code, "installed on 0 of 4 members"},
		{KeyringRemove, s1, fsm.ErrConflict.Code, "primary key of 4 of 4 members"},
		{KeyringInstall, "not base64!", fsm.ErrInvalid.Code, "not base64"},
		{KeyringInstall, base64.StdEncoding.EncodeToString([]byte("short")), fsm.ErrInvalid.Code, "is 5 bytes"},
		{"rotate", s2, fsm.ErrInvalid.Code, "unknown keyring operation"},
	} {
		_, err := follower.Keyring(ctx, c.op, c.key)
		var fe *fsm.Error
		if !errors.As(err, &fe) || fe.Code != c.code || !strings.Contains(fe.Message, c.msg) {
			t.Errorf("%s %q: %v, want %s mentioning %q", c.op, c.key, err, c.code, c.msg)
		}
	}
	if _, err := host.Keyring(ctx, KeyringList, ""); !errors.Is(err, ErrNotServer) {
		t.Errorf("keyring on a host: %v, want not_server", err)
	}

	res, err = follower.Keyring(ctx, KeyringInstall, s2)
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "install", res, 4, KeyringKey{Key: s1, Installed: 4, Primary: 4}, KeyringKey{Key: s2, Installed: 4})
	res, err = leader.Keyring(ctx, KeyringUse, s2)
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "use", res, 4, KeyringKey{Key: s2, Installed: 4, Primary: 4}, KeyringKey{Key: s1, Installed: 4})
	res, err = follower.Keyring(ctx, KeyringRemove, s1)
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "remove", res, 4, KeyringKey{Key: s2, Installed: 4, Primary: 4})
	for _, n := range append(slices.Clone(servers), host) {
		if got := keyringFile(t, n); !slices.Equal(got, []string{s2}) {
			t.Errorf("keyring file of %s holds %v, want the new key alone", n.cfg.NodeID, got)
		}
	}

	// The cluster works on the new key: writes commit, the host stays up,
	// a new host with the new key registers, one with the old key alone
	// stays out.
	mustApply(t, follower, gpuRequest(40))
	k2, _ := DecodeGossipKey(s2)
	nc := tc.fastConfig("h2", false)
	nc.EncryptKey = k2
	nc.Inventory = (&inventory{devices: []fsm.DeviceSpec{gpu("h2-gpu", 80)}}).get
	h2 := tc.start(nc)
	waitHost(t, leader, "h2", true, 1, fsm.Available)
	stale, jf := outsider(tc, "stale", false, k1)
	waitRefused(t, map[*Node]*joinFailures{stale: jf})
	checkUnseen(t, append(slices.Clone(servers), host, h2), []*Node{stale})
	tc.stop("stale")
	waitHost(t, leader, "h1", true, 1, fsm.Available)

	// Restarted with the old key on the command line, a server and the
	// host come back on the keyring they persisted.
	tc.crash(follower.cfg.NodeID)
	tc.crash("h1")
	back := tc.restart(follower.cfg.NodeID)
	tc.restart("h1")
	if got := encodeKeys(back.gossipKeys.ring.GetKeys()); !slices.Equal(got, []string{s2}) {
		t.Fatalf("restarted server holds %v, want the persisted key", got)
	}
	if err := tc.lc.WaitReady(ctxT(t, 30*time.Second)); err != nil {
		t.Fatal(err)
	}
	leader = tc.waitLeader()
	waitHost(t, leader, "h1", true, 1, fsm.Available)
	// Ready is Raft's word: the restarted server may not have rejoined
	// gossip yet, and its list asks the members it sees.
	waitMembersAlive(t, back, 5)
	res, err = back.Keyring(ctx, KeyringList, "")
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "list after restart", res, 5, KeyringKey{Key: s2, Installed: 5, Primary: 5})
	mustApply(t, back, gpuRequest(40))
}

// TestKeyringUseRefusedWhenAMemberLacksTheKey: a member that missed an
// install blocks use of the key, and nothing changes.
func TestKeyringUseRefusedWhenAMemberLacksTheKey(t *testing.T) {
	k1, s1 := newKey(t)
	_, s2 := newKey(t)
	tc := newTestCluster(t, func(c *Config) { c.EncryptKey = k1 })
	servers := tc.servers(3)
	ctx := ctxT(t, 30*time.Second)
	res, err := servers[0].Keyring(ctx, KeyringInstall, s2)
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "install", res, 3, KeyringKey{Key: s1, Installed: 3, Primary: 3}, KeyringKey{Key: s2, Installed: 3})
	k2, _ := DecodeGossipKey(s2)
	if _, err := servers[2].keyringLocal(KeyringRemove, k2); err != nil {
		t.Fatal(err)
	}
	// Each member refuses on its own too: using a key it lacks, removing
	// its primary key.
	if _, err := servers[2].keyringLocal(KeyringUse, k2); !errors.Is(err, fsm.ErrConflict) || !strings.Contains(err.Error(), "not installed on node s3") {
		t.Errorf("s3 uses a key it lacks: %v", err)
	}
	if _, err := servers[2].keyringLocal(KeyringRemove, k1); !errors.Is(err, fsm.ErrConflict) || !strings.Contains(err.Error(), "primary key of node s3") {
		t.Errorf("s3 removes its primary key: %v", err)
	}
	_, err = servers[0].Keyring(ctx, KeyringUse, s2)
	if !errors.Is(err, fsm.ErrConflict) || !strings.Contains(err.Error(), "installed on 2 of 3 members (missing on s3)") {
		t.Fatalf("use: %v, want a conflict naming s3", err)
	}
	res, err = servers[1].Keyring(ctx, KeyringList, "")
	if err != nil {
		t.Fatal(err)
	}
	wantKeys(t, "list", res, 3, KeyringKey{Key: s1, Installed: 3, Primary: 3}, KeyringKey{Key: s2, Installed: 2})
}

// TestKeyringOff: without a key, gossip is plain and the keyring cannot
// be changed.
func TestKeyringOff(t *testing.T) {
	tc := newTestCluster(t, nil)
	servers := tc.servers(1)
	_, s := newKey(t)
	_, err := servers[0].Keyring(ctxT(t, 10*time.Second), KeyringInstall, s)
	if !errors.Is(err, fsm.ErrConflict) || !strings.Contains(err.Error(), "gossip encryption is off") {
		t.Fatalf("install without encryption: %v", err)
	}
	if _, err := os.Stat(servers[0].cfg.keyringPath()); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a keyring file without encryption: %v", err)
	}
}

func TestKeyringFile(t *testing.T) {
	k1, s1 := newKey(t)
	k2, s2 := newKey(t)
	path := filepath.Join(t.TempDir(), "sub", "keyring")
	if keys, err := readKeyringFile(path); keys != nil || err != nil {
		t.Fatalf("absent file: %v, %v", keys, err)
	}
	if err := writeKeyringFile(path, [][]byte{k2, k1}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	if want := fmt.Sprintf("[%q,%q]\n", s2, s1); string(data) != want {
		t.Errorf("file %q, want %q", data, want)
	}
	keys, err := readKeyringFile(path)
	if err != nil || len(keys) != 2 || !bytes.Equal(keys[0], k2) || !bytes.Equal(keys[1], k1) {
		t.Fatalf("read back %v, %v", keys, err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*.tmp-*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
	for content, want := range map[string]string{
		"[]":               "holds no key",
		"{}":               "not a JSON list",
		`["c2hvcnQ="]`:     "key 1: gossip key is 5 bytes",
		`["` + s1 + `",1]`: "not a JSON list",
	} {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := readKeyringFile(path); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("file %s: %v, want %q", content, err, want)
		}
	}
}

// TestKeyringFileWinsOverEncryptKey: a node started with a keyring file
// and another key uses the file; a bad file or key stops the start.
func TestKeyringFileWinsOverEncryptKey(t *testing.T) {
	k1, _ := newKey(t)
	k2, s2 := newKey(t)
	dir := t.TempDir()
	if err := writeKeyringFile(filepath.Join(dir, KeyringFileName), [][]byte{k2}); err != nil {
		t.Fatal(err)
	}
	start := func(cfg Config) (*Node, error) {
		n, err := New(cfg)
		if err != nil {
			return nil, err
		}
		err = n.Start(ctxT(t, 10*time.Second))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = n.Shutdown(ctx)
		})
		return n, err
	}
	inv := (&inventory{}).get
	n, err := start(Config{NodeID: "h", DataDir: dir, EncryptKey: k1, Inventory: inv})
	if err != nil {
		t.Fatal(err)
	}
	if got := encodeKeys(n.gossipKeys.ring.GetKeys()); !slices.Equal(got, []string{s2}) {
		t.Fatalf("keys %v, want the file's", got)
	}
	_ = n.Shutdown(ctxT(t, 5*time.Second))

	// With no file, the key is written to a new one.
	other := filepath.Join(t.TempDir(), "ring")
	if _, err := start(Config{NodeID: "h2", KeyringFile: other, EncryptKey: k1, Inventory: inv}); err != nil {
		t.Fatal(err)
	}
	if keys, err := readKeyringFile(other); err != nil || len(keys) != 1 || !bytes.Equal(keys[0], k1) {
		t.Fatalf("new keyring file: %v, %v", keys, err)
	}

	if err := os.WriteFile(filepath.Join(dir, KeyringFileName), []byte("[]"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := start(Config{NodeID: "h3", DataDir: dir, EncryptKey: k1, Inventory: inv}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "holds no key") {
		t.Fatalf("start with an empty keyring file: %v", err)
	}
	if _, err := New(Config{NodeID: "h4", EncryptKey: []byte("short"), Inventory: inv}); !errors.Is(err, ErrConfig) {
		t.Fatalf("a 5-byte key: %v", err)
	}
}
