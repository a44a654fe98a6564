package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/transport"
)

// groupServer starts one server with a host of eight GPUs.
func groupServer(t *testing.T) *Node {
	t.Helper()
	tc := newTestCluster(t, nil)
	leader := tc.waitLeader(tc.servers(1)...)
	groupHost(t, leader)
	return leader
}

// groupHost registers a host of eight GPUs.
func groupHost(t *testing.T, n *Node) {
	t.Helper()
	devs := make([]fsm.DeviceSpec, 8)
	for i := range devs {
		devs[i] = gpu(fmt.Sprintf("g%d", i), 80)
	}
	mustApply(t, n, staticHost("h1", devs...))
}

// waitingIn reports how many entries wait in the group.
func waitingIn(g *WriteGroup) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.waiting)
}

type groupAnswer struct {
	member int
	res    fsm.Result
	err    error
}

// applyMember applies a one-GPU allocate as member i of g.
func applyMember(ctx context.Context, n *Node, g *WriteGroup, i int, out chan<- groupAnswer) {
	cmd := gpuRequest(10)
	res, err := n.Apply(g.Member(ctx, i), cmd)
	if err == nil && res.Err == nil && (res.Allocation == nil || res.Allocation.ID != cmd.AllocationID) {
		err = fmt.Errorf("member %d got the answer %+v, not its own allocation %s", i, res.Allocation, cmd.AllocationID)
	}
	out <- groupAnswer{i, res, err}
}

// The members reach the leader last first, each after the one before has
// joined; they are proposed together, in member order, when the last
// arrives: as one Batch entry, or, where a server is too old for it, as
// entries of their own with consecutive indexes. Without the group each
// would be proposed when it came.
func TestWriteGroupProposesTogetherInMemberOrder(t *testing.T) {
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprintf("batch entry %v", batch), func(t *testing.T) {
			leader := groupServer(t)
			leader.noBatchEntries = !batch
			batches := leader.fsm.CommandsApplied(fsm.BatchType)
			const members = 6
			g := NewWriteGroup(members, time.Minute)
			out := make(chan groupAnswer, members)
			ctx := ctxT(t, 20*time.Second)
			for i := members - 1; i >= 0; i-- {
				go applyMember(ctx, leader, g, i, out)
				if i > 0 {
					want := members - i
					poll(t, 5*time.Second, "member to join", func() error {
						if got := waitingIn(g); got != want {
							return fmt.Errorf("%d entries wait, want %d", got, want)
						}
						return nil
					})
				}
			}
			index := make([]uint64, members)
			seq := make([]uint64, members)
			for range members {
				a := <-out
				if a.err != nil || a.res.Err != nil {
					t.Fatalf("member %d: %v / %v", a.member, a.err, a.res.Err)
				}
				index[a.member], seq[a.member] = a.res.Index, a.res.Allocation.Seq
				g.Done(a.member)
			}
			for i := 1; i < members; i++ {
				if seq[i] <= seq[i-1] {
					t.Fatalf("allocations by member %v: want them made in member order", seq)
				}
				if batch && index[i] != index[0] || !batch && index[i] != index[i-1]+1 {
					t.Fatalf("log indexes by member %v: want one entry %v, else consecutive, in member order", index, batch)
				}
			}
			if got := leader.fsm.CommandsApplied(fsm.BatchType) - batches; batch && got != 1 || !batch && got != 0 {
				t.Fatalf("%d batch entries applied", got)
			}
		})
	}
}

// Replicas apply a Batch entry alike: their snapshots are the same bytes.
func TestWriteGroupBatchOnReplicas(t *testing.T) {
	tc := newTestCluster(t, nil)
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	groupHost(t, leader)
	poll(t, 10*time.Second, "every server to advertise its feature level", func() error {
		return leader.checkFeature(ctxT(t, time.Second), &fsm.Batch{})
	})
	const members = 12
	g := NewWriteGroup(members, time.Minute)
	out := make(chan groupAnswer, members)
	ctx := ctxT(t, 20*time.Second)
	for i := range members {
		go applyMember(ctx, leader, g, i, out)
	}
	refused := 0
	for range members {
		a := <-out
		if a.err != nil {
			t.Fatalf("member %d: %v", a.member, a.err)
		}
		if a.res.Err != nil {
			refused++ // eight GPUs for twelve
		}
		g.Done(a.member)
	}
	if refused != members-8 {
		t.Fatalf("%d members refused, want %d", refused, members-8)
	}
	if got := leader.fsm.CommandsApplied(fsm.BatchType); got != 1 {
		t.Fatalf("%d batch entries applied on the leader, want 1", got)
	}
	waitSame(t, nodes...)
}

// A member that finishes without reaching Raft (refused before it, sent
// to another node) does not hold the others.
func TestWriteGroupDoesNotWaitForMembersThatLeave(t *testing.T) {
	leader := groupServer(t)
	g := NewWriteGroup(3, time.Minute)
	g.Done(1)
	out := make(chan groupAnswer, 1)
	go applyMember(ctxT(t, 20*time.Second), leader, g, 0, out)
	poll(t, 5*time.Second, "member 0 to join", func() error {
		if waitingIn(g) != 1 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	g.Done(2)
	select {
	case a := <-out:
		if a.err != nil || a.res.Err != nil {
			t.Fatalf("member 0: %v / %v", a.err, a.res.Err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("member 0 still waits after the others left")
	}
}

// A member that never comes holds the others for maxWait at most.
func TestWriteGroupWaitIsBounded(t *testing.T) {
	leader := groupServer(t)
	const maxWait = 200 * time.Millisecond
	g := NewWriteGroup(2, maxWait)
	out := make(chan groupAnswer, 1)
	start := time.Now()
	go applyMember(ctxT(t, 20*time.Second), leader, g, 0, out)
	select {
	case a := <-out:
		if a.err != nil || a.res.Err != nil {
			t.Fatalf("member 0: %v / %v", a.err, a.res.Err)
		}
		if took := time.Since(start); took < maxWait {
			t.Fatalf("member 0 answered after %v, before the wait of %v was over", took, maxWait)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("member 0 still waits for a member that never came")
	}
	g.Done(1)
}

// A member whose context ends while it waits leaves the group without
// being proposed, and the group proposes nothing for it later.
func TestWriteGroupMemberCancelledWhileWaiting(t *testing.T) {
	leader := groupServer(t)
	g := NewWriteGroup(2, time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	cmd := gpuRequest(10)
	_, err := leader.Apply(g.Member(ctx, 0), cmd)
	if err == nil {
		t.Fatal("member 0 applied, want its context's end")
	}
	g.Done(0)
	g.Done(1)
	if waitingIn(g) != 0 {
		t.Fatal("an entry still waits in the group")
	}
	// A write after it, then nothing of member 0 is in the state.
	mustApply(t, leader, gpuRequest(10))
	stateOf(t, leader, func(s *fsm.State) {
		if _, ok := s.Allocation(cmd.AllocationID); ok {
			t.Fatalf("allocation %s of the cancelled member exists", cmd.AllocationID)
		}
	})
}

// A Batch is no write of its own: Apply and the node RPC refuse it.
func TestApplyRefusesABatch(t *testing.T) {
	leader := groupServer(t)
	b := &fsm.Batch{Commands: []fsm.Command{&fsm.Release{AllocationID: "a"}}}
	if _, err := leader.Apply(ctxT(t, 5*time.Second), b); !errors.Is(err, fsm.ErrInvalid) {
		t.Fatalf("Apply of a batch: %v, want ErrInvalid", err)
	}
	raw, err := fsm.Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leader.RPCApply(ctxT(t, 5*time.Second), transport.ApplyRequest{Command: raw, LeaderOnly: true}); !errors.Is(err, fsm.ErrInvalid) {
		t.Fatalf("RPCApply of a batch: %v, want ErrInvalid", err)
	}
	if got := leader.fsm.CommandsApplied(fsm.BatchType); got != 0 {
		t.Fatalf("%d batch entries applied", got)
	}
}
