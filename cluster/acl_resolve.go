package cluster

// Resolving ACL tokens. The HTTP API checks every request's token; a
// server finds it in its replica, a host (which has none) asks a server
// over the node RPC and keeps the answer a while, as Nomad's clients do.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/transport"
)

// maxCachedTokens bounds the answers a host keeps.
const maxCachedTokens = 4096

// maxResolveTries bounds the servers a host asks for one token.
const maxResolveTries = 3

// ResolveToken finds the ACL token whose secret hashes to secretHash
// (fsm.HashACLSecret; "" for the anonymous token) and what it may do.
// found is false when no such token exists. Expiry is not checked here:
// the caller compares ExpiresAt with its clock at use.
//
// A server answers from its local replica, as a read does. A follower
// that does not find the token there may only be behind (just restarted,
// or the token was created a moment ago through another server): it looks
// again once it has applied the leader's commit index (a read barrier),
// and when no leader answers it fails with the barrier's retryable error
// rather than call the token unknown. A host asks a server over the node
// RPC (any alive one, in turn, within RPCTimeout) and keeps the answer
// for Config.ACLTokenTTL (an unknown token for ACLTokenNegativeTTL);
// concurrent asks for one token share a call. With no server to answer
// it fails with the retryable ErrNoLeader.
func (n *Node) ResolveToken(ctx context.Context, secretHash string) (tok fsm.ACLToken, authz *fsm.Authorizer, found bool, err error) {
	if err := n.running(); err != nil {
		return tok, nil, false, err
	}
	if n.raft != nil {
		err := n.lookUpCaughtUp(ctx, func(st *fsm.State) bool {
			tok, found = st.TokenOfSecret(secretHash)
			authz = nil
			if found {
				authz = st.Authorizer(tok)
			}
			return found
		})
		if err != nil {
			return fsm.ACLToken{}, nil, false, err
		}
		return tok, authz, found, nil
	}
	e, err := n.resolveRemote(ctx, secretHash)
	return e.tok, e.authz, e.found, err
}

// lookUpCaughtUp runs look, which reports whether it found what it looks
// for, on the local replica. On a follower that did not find it, it runs
// look again once the replica has applied the leader's commit index (a
// read barrier, whose error it returns): the replica may only be behind.
func (n *Node) lookUpCaughtUp(ctx context.Context, look func(*fsm.State) bool) error {
	found := false
	n.fsm.Read(func(st *fsm.State) { found = look(st) })
	if found || n.IsLeader() {
		return nil
	}
	if err := n.readBarrier(ctx); err != nil {
		return err
	}
	n.fsm.Read(func(st *fsm.State) { look(st) })
	return nil
}

// RPCResolveToken serves a host's (or a server's) ask for a token from
// the local replica, looked up again after a read barrier when a follower
// does not find it. Hosts answer ErrNotServer.
func (n *Node) RPCResolveToken(ctx context.Context, req transport.ResolveTokenRequest) (transport.ResolveTokenResponse, error) {
	if n.raft == nil {
		return transport.ResolveTokenResponse{}, clusterErr(ErrNotServer, "tokens are resolved by servers")
	}
	if err := n.running(); err != nil {
		return transport.ResolveTokenResponse{}, err
	}
	var resp transport.ResolveTokenResponse
	err := n.lookUpCaughtUp(ctx, func(st *fsm.State) bool {
		resp.Token, resp.Found = st.TokenOfSecret(req.SecretHash)
		resp.Policies = nil
		if resp.Found {
			resp.Policies = st.ACLTokenPolicies(resp.Token)
		}
		return resp.Found
	})
	if err != nil {
		return transport.ResolveTokenResponse{}, err
	}
	resp.Token.SecretHash = ""
	return resp, nil
}

// resolveRemote answers from the cache, or asks a server: one call per
// token at a time, the others waiting for its answer.
func (n *Node) resolveRemote(ctx context.Context, hash string) (tokenEntry, error) {
	for {
		e, c, first := n.tokens.lookup(hash, time.Now())
		if c == nil {
			return e, nil
		}
		if first {
			e, err := n.askServers(ctx, hash)
			n.tokens.finish(hash, c, e, err, n.cfg.ACLTokenTTL, n.cfg.ACLTokenNegativeTTL)
			return e, err
		}
		select {
		case <-c.done:
			if c.err == nil {
				return c.entry, nil
			}
			// The call failed, maybe only for its caller's context:
			// look again (and ask, if no one else does).
			if err := ctx.Err(); err != nil {
				return tokenEntry{}, fmt.Errorf("%w: %w", ErrTimeout, err)
			}
		case <-ctx.Done():
			return tokenEntry{}, fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
		}
	}
}

// askServers asks alive servers in turn, from the next in the round robin,
// until one answers, within RPCTimeout in all.
func (n *Node) askServers(ctx context.Context, hash string) (tokenEntry, error) {
	servers := n.aliveServers()
	if len(servers) == 0 {
		return tokenEntry{}, clusterErr(ErrNoLeader, "no server known to resolve the ACL token")
	}
	ctx, cancel := context.WithTimeout(ctx, n.cfg.RPCTimeout)
	defer cancel()
	start := int(n.nextServer.Add(1) % uint64(len(servers)))
	var lastErr error
	for i := 0; i < min(len(servers), maxResolveTries); i++ {
		addr := servers[(start+i)%len(servers)]
		// Each try may take half of what is left, so that a server that
		// does not answer leaves time for another.
		tctx, tcancel := ctx, context.CancelFunc(func() {})
		if dl, ok := ctx.Deadline(); ok && i+1 < min(len(servers), maxResolveTries) {
			tctx, tcancel = context.WithTimeout(ctx, time.Until(dl)/2)
		}
		resp, err := n.rpc.ResolveToken(n.toServer(tctx, ""), addr, transport.ResolveTokenRequest{SecretHash: hash})
		tcancel()
		if err == nil {
			e := tokenEntry{tok: resp.Token, found: resp.Found}
			if resp.Found {
				e.authz = fsm.NewAuthorizer(resp.Token, resp.Policies)
			}
			return e, nil
		}
		lastErr = err
		n.log.Debug("resolving an ACL token failed", "server", addr, "error", err)
		if !errors.Is(err, transport.ErrUnreachable) && !IsRetryable(err) {
			return tokenEntry{}, err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return tokenEntry{}, fmt.Errorf("%w: resolving the ACL token: %w", ErrTimeout, err)
	}
	return tokenEntry{}, clusterErr(ErrNoLeader, "no server resolved the ACL token: "+lastErr.Error())
}

// tokenEntry is one answer: the token (found) and what it may do.
type tokenEntry struct {
	tok     fsm.ACLToken
	authz   *fsm.Authorizer
	found   bool
	expires time.Time
}

// tokenCall is an ask in flight; done closes when entry or err is set.
type tokenCall struct {
	done  chan struct{}
	entry tokenEntry
	err   error
}

// tokenCache keeps a host's answers by secret hash. The zero value is
// ready to use.
type tokenCache struct {
	mu       sync.Mutex
	entries  map[string]tokenEntry
	inFlight map[string]*tokenCall
}

// lookup returns a fresh answer (c nil), or the call to wait for, first
// when the caller must make it.
func (tc *tokenCache) lookup(hash string, now time.Time) (e tokenEntry, c *tokenCall, first bool) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if e, ok := tc.entries[hash]; ok {
		if now.Before(e.expires) {
			return e, nil, false
		}
		delete(tc.entries, hash)
	}
	if c := tc.inFlight[hash]; c != nil {
		return tokenEntry{}, c, false
	}
	if tc.inFlight == nil {
		tc.inFlight = map[string]*tokenCall{}
	}
	c = &tokenCall{done: make(chan struct{})}
	tc.inFlight[hash] = c
	return tokenEntry{}, c, true
}

// finish ends a call, keeping a successful answer for ttl (negTTL when
// no token was found).
func (tc *tokenCache) finish(hash string, c *tokenCall, e tokenEntry, err error, ttl, negTTL time.Duration) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	delete(tc.inFlight, hash)
	if err == nil {
		now := time.Now()
		if e.found {
			e.expires = now.Add(ttl)
		} else {
			e.expires = now.Add(negTTL)
		}
		if tc.entries == nil {
			tc.entries = map[string]tokenEntry{}
		}
		if len(tc.entries) >= maxCachedTokens {
			tc.evict(now)
		}
		tc.entries[hash] = e
	}
	c.entry, c.err = e, err
	close(c.done)
}

// evict drops the expired answers, and when that is not enough, unknown
// tokens first, then any, until a quarter of the room is free.
func (tc *tokenCache) evict(now time.Time) {
	for h, e := range tc.entries {
		if !now.Before(e.expires) {
			delete(tc.entries, h)
		}
	}
	for _, negative := range []bool{true, false} {
		for h, e := range tc.entries {
			if len(tc.entries) < maxCachedTokens*3/4 {
				return
			}
			if !e.found || !negative {
				delete(tc.entries, h)
			}
		}
	}
}

// len is the number of answers kept (tests).
func (tc *tokenCache) len() int {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return len(tc.entries)
}
