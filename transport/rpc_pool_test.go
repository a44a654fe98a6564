package transport

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// gatedNode answers RPCApply only once n calls are in at the same time,
// so that each call holds a connection of its own.
type gatedNode struct {
	fakeNode
	n    int
	mu   sync.Mutex
	in   int
	open chan struct{}
}

func (g *gatedNode) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.in, g.open = 0, make(chan struct{})
}

func (g *gatedNode) RPCApply(ctx context.Context, req ApplyRequest) (ApplyResponse, error) {
	g.mu.Lock()
	g.in++
	if g.in == g.n {
		close(g.open)
	}
	open := g.open
	g.mu.Unlock()
	select {
	case <-open:
		return NewApplyResponse(fsm.Result{Index: 7}), nil
	case <-ctx.Done():
		return ApplyResponse{}, ctx.Err()
	}
}

// A follower forwarding many writes at once keeps its connections to the
// leader for the next ones rather than dialling one per call: rounds of
// 64 calls in flight together dial about 64 connections in all, not 64
// per round.
func TestRPCClientReusesConnectionsUnderLoad(t *testing.T) {
	const calls, rounds = 64, 4
	g := &gatedNode{n: calls}
	var dials atomic.Int64
	d := &net.Dialer{Timeout: 2 * time.Second}
	c := NewRPCClient(func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, addr)
	})
	addr := serveWith(t, g, c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	data, err := fsm.Encode(&fsm.Release{AllocationID: "a1"})
	if err != nil {
		t.Fatal(err)
	}
	for range rounds {
		g.reset()
		var wg sync.WaitGroup
		errs := make(chan error, calls)
		for range calls {
			wg.Go(func() {
				if _, err := c.Apply(ctx, addr, ApplyRequest{Command: data, LeaderOnly: true}); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	// A connection goes back to the pool just after its call returns, so
	// a few may be dialled again; one per call past the pool's bound
	// would be calls-8 more per round.
	if got := dials.Load(); got > calls+calls/2 {
		t.Errorf("%d rounds of %d calls in flight dialled %d connections, want about %d", rounds, calls, got, calls)
	}
}
