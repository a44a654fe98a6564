package cluster

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// A WriteGroup gathers the writes of one batch (POST /v1/batch) on the
// leader, so that they reach Raft together and share one log append and
// one commit. Without it each write of the batch is handed to Raft when
// its own handler gets there; the leader loop takes whatever is waiting
// at that moment, and the rest of the batch goes with the next append,
// so the batch's answer waits for two commits (BENCHMARKS.md: 1.48
// appends per batch).
//
// Each member of the group is one write of the batch. A member that
// reaches the leader's apply (applyLeader) waits there until every other
// member has either reached it too or finished without it (an error
// before Raft, a write forwarded to another node), or until maxWait has
// passed since the first arrived; then the last to come hands all the
// waiting entries to Raft at once, in member order. A member whose
// context ends while it waits leaves the group unproposed. Nothing else
// changes: each entry is still its own log entry with its own answer.
type WriteGroup struct {
	maxWait time.Duration

	mu sync.Mutex
	// settled marks the members that have joined or finished.
	settled []bool
	// pending counts the members not settled.
	pending int
	// waiting are the joined members' entries, not yet proposed.
	waiting []*groupEntry
	// proposed is set once the waiting entries went to Raft: a member
	// that comes later goes alone.
	proposed bool
	timer    *time.Timer
}

// groupEntry is a joined member's log entry and, once proposed (ready
// closed), how to wait for its answer.
type groupEntry struct {
	member  int
	n       *Node
	data    []byte
	enqueue time.Duration
	ready   chan struct{}
	// Set before ready is closed: the future and the channel its wait
	// ends on (raftWait), or the error that kept it from Raft.
	f    raft.ApplyFuture
	done <-chan error
	err  error
}

// WriteGroupMaxWait bounds how long the first member of a group waits for
// the others: long enough for the other handlers of a batch to decode
// and check their request on a busy machine, short against a commit.
const WriteGroupMaxWait = 2 * time.Millisecond

// NewWriteGroup makes a group of members writes that wait at most maxWait
// for each other.
func NewWriteGroup(members int, maxWait time.Duration) *WriteGroup {
	return &WriteGroup{maxWait: maxWait, settled: make([]bool, members), pending: members}
}

type groupMemberKey struct{}

type groupMember struct {
	g *WriteGroup
	i int
}

// Member returns ctx for the member i of the group: a write applied with
// it on the leader waits for the rest of the group.
func (g *WriteGroup) Member(ctx context.Context, i int) context.Context {
	return context.WithValue(ctx, groupMemberKey{}, groupMember{g, i})
}

// Done says member i has finished; if it never reached Raft, the group
// stops waiting for it. Every member must call it.
func (g *WriteGroup) Done(i int) {
	g.mu.Lock()
	if g.settled[i] {
		g.mu.Unlock()
		return
	}
	g.settled[i] = true
	g.pending--
	batch := g.takeLocked(false)
	g.mu.Unlock()
	propose(batch)
}

// takeLocked returns the entries to propose now: all that wait, when no
// member is pending any more or the wait is over.
func (g *WriteGroup) takeLocked(timedOut bool) []*groupEntry {
	if g.proposed || len(g.waiting) == 0 || (g.pending > 0 && !timedOut) {
		return nil
	}
	g.proposed = true
	if g.timer != nil {
		g.timer.Stop()
	}
	batch := g.waiting
	g.waiting = nil
	return batch
}

// join adds member i's entry to the group. It returns nil when the member
// is to go alone (the group has already proposed, or this member has
// joined before: a retry).
func (g *WriteGroup) join(i int, e *groupEntry) *groupEntry {
	g.mu.Lock()
	if g.proposed || g.settled[i] {
		g.mu.Unlock()
		return nil
	}
	g.settled[i] = true
	g.pending--
	e.member = i
	e.ready = make(chan struct{})
	g.waiting = append(g.waiting, e)
	if g.timer == nil && g.pending > 0 {
		g.timer = time.AfterFunc(g.maxWait, func() {
			g.mu.Lock()
			batch := g.takeLocked(true)
			g.mu.Unlock()
			propose(batch)
		})
	}
	batch := g.takeLocked(false)
	g.mu.Unlock()
	propose(batch)
	return e
}

// leave takes e out of the group if it has not been proposed yet; it
// reports whether it did.
func (g *WriteGroup) leave(e *groupEntry) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for k, w := range g.waiting {
		if w == e {
			g.waiting = append(g.waiting[:k], g.waiting[k+1:]...)
			return true
		}
	}
	return false
}

// propose hands the entries to Raft in member order, one right after the
// other: Raft's apply channel is buffered (raftConfig), so they wait there
// together for the leader loop, which takes what is waiting when it next
// looks. The waits for the answers start only after the last is handed
// over, so that little comes between two.
func propose(batch []*groupEntry) {
	if len(batch) == 0 {
		return
	}
	slices.SortFunc(batch, func(a, b *groupEntry) int { return cmp.Compare(a.member, b.member) })
	for _, e := range batch {
		_, e.err = e.n.raftIssue(func() raft.Future { e.f = e.n.raft.Apply(e.data, e.enqueue); return e.f })
	}
	for _, e := range batch {
		if e.err == nil {
			e.done = e.n.raftWait(e.f)
		}
		close(e.ready)
	}
}

// applyGrouped proposes data as member of the group in ctx, if there is
// one and this write may join it; ok is false when it is to go alone.
func (n *Node) applyGrouped(ctx context.Context, data []byte, enqueue time.Duration) (f raft.ApplyFuture, err error, ok bool) {
	m, isMember := ctx.Value(groupMemberKey{}).(groupMember)
	if !isMember {
		return nil, nil, false
	}
	e := m.g.join(m.i, &groupEntry{n: n, data: data, enqueue: enqueue})
	if e == nil {
		return nil, nil, false
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		if m.g.leave(e) {
			return nil, ctx.Err(), true
		}
		<-e.ready // being proposed now: wait for the future as below
	}
	if e.err != nil {
		return nil, e.err, true
	}
	select {
	case err := <-e.done:
		return e.f, err, true
	case <-ctx.Done():
		return nil, ctx.Err(), true
	}
}
