package cluster

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/fsm"
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
// passed since the first arrived; then the last to come proposes all the
// waiting writes at once, in member order: as one fsm.Batch entry when
// every server supports it, else as entries of their own handed to Raft
// one right after the other (propose). A member whose context ends while
// it waits leaves the group unproposed. Each write keeps its own answer.
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

// groupEntry is a joined member's command and, once proposed (ready
// closed), the proposal that carries it.
type groupEntry struct {
	member  int
	n       *Node
	cmd     fsm.Command
	payload []byte // fsm.Encode(cmd)
	enqueue time.Duration
	ready   chan struct{}
	// Set before ready is closed: the log entry the command went in and
	// its place there (-1: the entry is the command alone).
	p   *proposal
	pos int
}

// proposal is one log entry handed to Raft for the group.
type proposal struct {
	f raft.ApplyFuture
	// done is closed once err is set: what kept the entry from Raft, or
	// Raft's answer to it.
	done chan struct{}
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

// propose hands the entries to Raft in member order. When there are
// several, they are allocation writes and every server supports it
// (feature level 5), they go as one log entry, an fsm.Batch: one entry
// to store, send and apply for the lot. Otherwise each is its own entry,
// handed over one right after the other: Raft's apply channel is
// buffered (raftConfig), so they wait there together for the leader
// loop, which takes what is waiting when it next looks. The waits for
// the answers start only after the last is handed over, so that little
// comes between two.
func propose(batch []*groupEntry) {
	if len(batch) == 0 {
		return
	}
	slices.SortFunc(batch, func(a, b *groupEntry) int { return cmp.Compare(a.member, b.member) })
	n := batch[0].n
	if len(batch) > 1 && n.batchEntries(batch) {
		encoded := make([][]byte, len(batch))
		enqueue := batch[0].enqueue
		for k, e := range batch {
			encoded[k], enqueue = e.payload, min(enqueue, e.enqueue)
		}
		p := n.issue(wrapCommand(&fsm.Batch{}, fsm.EncodeBatch(encoded)), enqueue)
		for k, e := range batch {
			e.p, e.pos = p, k
		}
	} else {
		for _, e := range batch {
			e.p, e.pos = n.issue(wrapCommand(e.cmd, e.payload), e.enqueue), -1
		}
	}
	var last *proposal
	for _, e := range batch {
		if e.p != last {
			n.await(e.p)
			last = e.p
		}
		close(e.ready)
	}
}

// batchEntries reports whether the entries may go as one fsm.Batch.
func (n *Node) batchEntries(batch []*groupEntry) bool {
	if n.noBatchEntries || len(batch) > fsm.MaxBatchCommands {
		return false
	}
	for _, e := range batch {
		if !fsm.Batchable(e.cmd) {
			return false
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return n.checkFeature(ctx, &fsm.Batch{}) == nil
}

// issue hands a log entry to Raft (raftIssue).
func (n *Node) issue(data []byte, enqueue time.Duration) *proposal {
	p := &proposal{done: make(chan struct{})}
	_, p.err = n.raftIssue(func() raft.Future { p.f = n.raft.Apply(data, enqueue); return p.f })
	return p
}

// await waits for an issued proposal's answer, in a goroutine (raftWait),
// and then closes its done.
func (n *Node) await(p *proposal) {
	if p.err != nil {
		close(p.done)
		return
	}
	n.raftAwait(p.f, func(err error) {
		p.err = err
		close(p.done)
	})
}

// applyGrouped applies cmd, encoded as payload, as member of the group in
// ctx, if there is one and this write may join it; grouped is false when
// it is to go alone.
func (n *Node) applyGrouped(ctx context.Context, cmd fsm.Command, payload []byte, enqueue time.Duration) (res fsm.Result, err error, grouped bool) {
	m, isMember := ctx.Value(groupMemberKey{}).(groupMember)
	if !isMember {
		return res, nil, false
	}
	e := m.g.join(m.i, &groupEntry{n: n, cmd: cmd, payload: payload, enqueue: enqueue})
	if e == nil {
		return res, nil, false
	}
	select {
	case <-e.ready:
	case <-ctx.Done():
		if m.g.leave(e) {
			return res, mapRaftErr(ctx.Err()), true
		}
		<-e.ready // being proposed now: wait for the answer as below
	}
	select {
	case <-e.p.done:
		if e.p.err != nil {
			return res, mapRaftErr(e.p.err), true
		}
		res, err = entryResult(e.p.f, e.pos)
		return res, err, true
	case <-ctx.Done():
		return res, mapRaftErr(ctx.Err()), true
	}
}
