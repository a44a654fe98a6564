package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// TestHostResolvesTokens checks that a host, which has no replica,
// resolves tokens through a server: a token and its policies, the
// anonymous token, an unknown one; that it keeps what it learnt for the
// TTL; and that a token deleted on the servers is gone for it after the
// TTL.
func TestHostResolvesTokens(t *testing.T) {
	const ttl = 2 * time.Second
	tc := newTestCluster(t, func(c *Config) {
		c.ACLEnabled = true
		c.ACLTokenTTL, c.ACLTokenNegativeTTL = ttl, 200*time.Millisecond
	})
	servers := tc.servers(1)
	leader := tc.waitLeader(servers...)
	ctx := ctxT(t, 30*time.Second)
	mustApply(t, leader, &fsm.ACLPolicyUpsert{Policy: fsm.ACLPolicy{Name: "team-a", Rules: fsm.ACLRules{
		Namespaces: map[string]fsm.Access{"team-a": fsm.AccessWrite}, Devices: fsm.AccessRead,
	}}})
	mustApply(t, leader, &fsm.ACLPolicyUpsert{Policy: fsm.ACLPolicy{Name: "anon", Rules: fsm.ACLRules{Agent: fsm.AccessRead}}})
	hash := fsm.HashACLSecret("secret-a")
	mustApply(t, leader, &fsm.ACLTokenUpsert{Token: fsm.ACLToken{AccessorID: "a", SecretHash: hash, Policies: []string{"team-a"}}})
	mustApply(t, leader, &fsm.ACLTokenUpsert{Token: fsm.ACLToken{AccessorID: fsm.AnonymousAccessorID, Policies: []string{"anon"}}})

	// A server resolves from its replica.
	tok, authz, found, err := leader.ResolveToken(ctx, hash)
	if err != nil || !found || tok.AccessorID != "a" || !authz.Allowed(fsm.AreaAllocations, "team-a", true) {
		t.Fatalf("on the server: %+v %t %v", tok, found, err)
	}

	hc := tc.fastConfig("h1", false)
	hc.Inventory = (&inventory{devices: []fsm.DeviceSpec{gpu("h1-gpu", 40)}}).get
	host := tc.start(hc)
	if _, err := host.Read(ctx, ReadOptions{}, func(*fsm.State) {}); !errors.Is(err, ErrNotServer) {
		t.Fatalf("a host read: %v, want not_server", err)
	}
	var resolvedAt time.Time // before the answer the host keeps was asked for
	poll(t, 15*time.Second, "the host resolves the token", func() error {
		resolvedAt = time.Now()
		tok, authz, found, err = host.ResolveToken(ctx, hash)
		switch {
		case err != nil:
			return err
		case !found:
			return fmt.Errorf("not found")
		}
		return nil
	})
	if tok.AccessorID != "a" || tok.SecretHash != "" || len(tok.Policies) != 1 {
		t.Fatalf("the host's token: %+v", tok)
	}
	for _, tc := range []struct {
		area  fsm.Area
		ns    string
		write bool
		want  bool
	}{
		{fsm.AreaAllocations, "team-a", true, true},
		{fsm.AreaAllocations, "team-b", false, false},
		{fsm.AreaDevices, "", false, true},
		{fsm.AreaDevices, "", true, false},
		{fsm.AreaOperator, "", false, false},
	} {
		if got := authz.Allowed(tc.area, tc.ns, tc.write); got != tc.want {
			t.Errorf("%s %q write=%t: %t, want %t", tc.area, tc.ns, tc.write, got, tc.want)
		}
	}
	tok, authz, found, err = host.ResolveToken(ctx, "")
	if err != nil || !found || tok.AccessorID != fsm.AnonymousAccessorID || !authz.Allowed(fsm.AreaAgent, "", false) || authz.Allowed(fsm.AreaDevices, "", false) {
		t.Fatalf("the anonymous token on the host: %+v %t %v", tok, found, err)
	}
	if _, _, found, err = host.ResolveToken(ctx, fsm.HashACLSecret("unknown")); err != nil || found {
		t.Fatalf("an unknown token on the host: found %t, %v", found, err)
	}
	if n := host.tokens.len(); n != 3 {
		t.Fatalf("the host keeps %d answers, want 3", n)
	}

	// Deleted on the servers, the token lives on in the host's cache
	// until the TTL, then is gone.
	deleted := time.Now()
	mustApply(t, leader, &fsm.ACLTokenDelete{AccessorID: "a"})
	if _, _, found, _ := leader.ResolveToken(ctx, hash); found {
		t.Fatal("the server still resolves a deleted token")
	}
	if within := time.Since(resolvedAt) < ttl; within {
		if _, _, found, err := host.ResolveToken(ctx, hash); err != nil || !found {
			t.Fatalf("the host asked again within the TTL: found %t, %v", found, err)
		}
	} else {
		t.Log("the TTL passed before the delete; the cache hit is not checked")
	}
	poll(t, 3*ttl, "the deleted token gone on the host", func() error {
		if _, _, found, err := host.ResolveToken(ctx, hash); err != nil || found {
			return fmt.Errorf("found %t, %v", found, err)
		}
		return nil
	})
	if since := time.Since(deleted); since > 3*ttl {
		t.Fatalf("the deleted token lived on %s", since)
	}

	// Many asks at once for a token not kept share the calls.
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, found, err := host.ResolveToken(ctx, ""); err != nil || !found {
				errs <- fmt.Errorf("found %t, %v", found, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestHostResolveWithoutServers checks that a host that knows no server
// fails a resolve with the retryable no_leader, without waiting.
func TestHostResolveWithoutServers(t *testing.T) {
	tc := newTestCluster(t, nil)
	servers := tc.servers(1)
	tc.waitLeader(servers...)
	hc := tc.fastConfig("h1", false)
	hc.Join = nil
	hc.Inventory = (&inventory{}).get
	host := tc.start(hc)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _, _, err := host.ResolveToken(ctx, "")
	if !errors.Is(err, ErrNoLeader) || !IsRetryable(err) {
		t.Fatalf("resolve without servers: %v, want no_leader", err)
	}
	if host.tokens.len() != 0 {
		t.Fatal("a failure was kept")
	}
}

// TestTokenCacheBounded checks that the cache keeps at most
// maxCachedTokens answers, dropping unknown tokens before known ones.
func TestTokenCacheBounded(t *testing.T) {
	var tc tokenCache
	for i := 0; i < maxCachedTokens+10; i++ {
		h := fmt.Sprint(i)
		_, c, first := tc.lookup(h, time.Now())
		if c == nil || !first {
			t.Fatal("a new hash is not asked for")
		}
		tc.finish(h, c, tokenEntry{found: i < 10}, nil, time.Minute, time.Minute)
	}
	if n := tc.len(); n > maxCachedTokens {
		t.Fatalf("%d answers kept", n)
	}
	for i := 0; i < 10; i++ {
		if e, c, _ := tc.lookup(fmt.Sprint(i), time.Now()); c != nil || !e.found {
			t.Fatalf("known token %d was dropped", i)
		}
	}
	// A waiter gets the first caller's answer.
	_, c1, first1 := tc.lookup("x", time.Now())
	_, c2, first2 := tc.lookup("x", time.Now())
	if !first1 || first2 || c1 != c2 {
		t.Fatal("a second ask does not wait for the first")
	}
	tc.finish("x", c1, tokenEntry{found: true, tok: fsm.ACLToken{AccessorID: "x"}}, nil, time.Minute, time.Minute)
	<-c2.done
	if c2.err != nil || c2.entry.tok.AccessorID != "x" {
		t.Fatalf("the waiter got %+v, %v", c2.entry, c2.err)
	}
	// An expired answer is asked again.
	if _, c, first := tc.lookup("x", time.Now().Add(2*time.Minute)); c == nil || !first {
		t.Fatal("an expired answer was used")
	}
}

// TestResolveTokenOnAReplicaBehind checks that a server whose replica is
// behind does not call a token unknown: restarted, a server's replica is
// empty until Raft tells it what was committed (here, until it wins its
// own election), and the token is found once it has caught up, where the
// replica alone would have said "not found".
func TestResolveTokenOnAReplicaBehind(t *testing.T) {
	tc := newTestCluster(t, func(c *Config) { c.ACLEnabled = true })
	s := tc.waitLeader(tc.servers(1)...)
	hash := fsm.HashACLSecret("secret-a")
	mustApply(t, s, &fsm.ACLTokenUpsert{Token: fsm.ACLToken{AccessorID: "a", SecretHash: hash}})
	id := s.cfg.NodeID
	tc.crash(id)
	s = tc.restart(id)

	behind := false
	s.fsm.Read(func(st *fsm.State) { _, found := st.TokenOfSecret(hash); behind = !found })
	tok, _, found, err := s.ResolveToken(ctxT(t, 30*time.Second), hash)
	if err != nil || !found || tok.AccessorID != "a" {
		t.Fatalf("resolve after the restart: %+v found=%t err=%v", tok, found, err)
	}
	if !behind {
		t.Log("the replica had caught up before the lookup: this run did not exercise the wait")
	}
}
