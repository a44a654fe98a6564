package integration

// The nemesis of the fault-injection test: while the clients run, it kills
// servers with SIGKILL and restarts them, freezes them with SIGSTOP past
// the election timeout, and partitions the network (partitioner: see
// nemesis_linux_test.go), one fault at a time, each healed before the
// next; it measures how long the cluster takes to have a new leader after
// a fault that took the leader away.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// faultKind names a fault the nemesis injects.
type faultKind string

const (
	faultKillLeader     faultKind = "kill-leader"
	faultKillFollower   faultKind = "kill-follower"
	faultFreezeLeader   faultKind = "freeze-leader"
	faultFreezeFollower faultKind = "freeze-follower"
	faultIsolateLeader  faultKind = "partition-leader"
	faultSplit          faultKind = "partition-split"
	faultBridge         faultKind = "partition-bridge"
)

// nemesisEvent is one fault, for the record (times as historyOp's).
type nemesisEvent struct {
	Kind    faultKind `json:"kind"`
	Targets string    `json:"targets"`
	Start   int64     `json:"start_ns"`
	End     int64     `json:"end_ns"`
	// Failover is how long a new leader took, when the fault took the
	// leader away.
	Failover time.Duration `json:"failover,omitempty"`
}

type nemesis struct {
	c     *Cluster
	rng   *rand.Rand
	parts *partitioner // nil: no partitions
	now   func() int64
	logf  func(format string, args ...any)
	// minHold and maxHold bound how long a fault lasts; a freeze lasts at
	// least freezeHold, well past the election timeout.
	minHold, maxHold, freezeHold time.Duration
	// recover bounds the wait for every server to be ready after a heal.
	recover time.Duration

	// failed is closed when the cluster did not recover from a fault:
	// the nemesis stops and the run ends early.
	failed     chan struct{}
	failedOnce sync.Once

	mu        sync.Mutex
	faults    map[faultKind]int
	failovers []time.Duration
	events    []nemesisEvent
	errs      []string
	watchers  sync.WaitGroup
}

func newNemesis(c *Cluster, rng *rand.Rand, parts *partitioner, now func() int64, logf func(string, ...any)) *nemesis {
	return &nemesis{
		c: c, rng: rng, parts: parts, now: now, logf: logf,
		minHold: 1500 * time.Millisecond, maxHold: 3500 * time.Millisecond, freezeHold: 2 * time.Second,
		recover: 45 * time.Second,
		faults:  map[faultKind]int{},
		failed:  make(chan struct{}),
	}
}

func (n *nemesis) kinds() []faultKind {
	ks := []faultKind{faultKillLeader, faultKillFollower, faultFreezeLeader, faultFreezeFollower}
	if n.parts != nil {
		ks = append(ks, faultIsolateLeader, faultSplit, faultBridge)
	}
	return ks
}

// run injects faults until stop is closed; the fault in force then is
// healed before it returns.
func (n *nemesis) run(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			n.watchers.Wait()
			return
		case <-n.failed:
			n.watchers.Wait()
			return
		case <-time.After(time.Duration(300+n.rng.IntN(900)) * time.Millisecond):
		}
		n.once()
	}
}

func (n *nemesis) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	n.mu.Lock()
	n.errs = append(n.errs, msg)
	n.mu.Unlock()
	n.logf("nemesis: %s", msg)
}

func names(ps []*Process) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.Name)
	}
	return strings.Join(s, ",")
}

// once injects one fault, holds it, heals it and waits for the cluster to
// recover.
func (n *nemesis) once() {
	c := n.c
	ctx, cancel := context.WithTimeout(context.Background(), n.recover)
	leader, err := c.Leader(ctx)
	cancel()
	if err != nil {
		n.errorf("no leader within %v before a fault: %v", n.recover, err)
		n.failedOnce.Do(func() { close(n.failed) })
		return
	}
	st, err := c.Status(context.Background(), leader)
	if err != nil {
		return
	}
	kinds := n.kinds()
	kind := kinds[n.rng.IntN(len(kinds))]
	followers := Except(c.Servers, leader)
	follower := followers[n.rng.IntN(len(followers))]
	shuffled := append([]*Process(nil), c.Servers...)
	n.rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	hold := n.minHold + time.Duration(n.rng.Int64N(int64(n.maxHold-n.minHold)))

	ev := nemesisEvent{Kind: kind, Start: n.now()}
	var heal func() error
	var lostLeader bool // the leader is gone until the heal
	var excluded *Process
	switch kind {
	case faultKillLeader, faultKillFollower:
		p := follower
		if kind == faultKillLeader {
			p, lostLeader = leader, true
		}
		ev.Targets = p.Name
		err = p.Kill()
		heal = p.Start
		excluded = p
	case faultFreezeLeader, faultFreezeFollower:
		p := follower
		if kind == faultFreezeLeader {
			p, lostLeader = leader, true
		}
		ev.Targets = p.Name
		hold = max(hold, n.freezeHold)
		err = p.Signal(syscall.SIGSTOP)
		heal = func() error { return p.Signal(syscall.SIGCONT) }
		excluded = p
	case faultIsolateLeader:
		ev.Targets = leader.Name + " | " + names(followers)
		err = n.parts.cut([]*Process{leader}, followers)
		heal = n.parts.heal
		lostLeader = true
	case faultSplit:
		// A minority (1 of 3, 2 of 5) against the majority.
		k := (len(shuffled) - 1) / 2
		minority, majority := shuffled[:k], shuffled[k:]
		ev.Targets = names(minority) + " | " + names(majority)
		err = n.parts.cut(minority, majority)
		heal = n.parts.heal
		for _, p := range minority {
			lostLeader = lostLeader || p == leader
		}
	case faultBridge:
		// Two sides that cannot talk to each other, one server talking to
		// both: a | b | c with 3, a,b | c | d,e with 5.
		k := len(shuffled) / 2
		left, bridge, right := shuffled[:k], shuffled[k], shuffled[k+1:]
		ev.Targets = names(left) + " | " + bridge.Name + " | " + names(right)
		err = n.parts.cut(left, right)
		heal = n.parts.heal
	}
	if err != nil {
		n.errorf("injecting %s on %s: %v", kind, ev.Targets, err)
	}
	n.mu.Lock()
	n.faults[kind]++
	n.mu.Unlock()
	start := time.Now()
	n.logf("nemesis: %s %s for %v", kind, ev.Targets, hold.Round(time.Millisecond))

	var failover time.Duration
	var healed atomic.Bool
	watchDone := make(chan struct{})
	if lostLeader {
		n.watchers.Add(1)
		go func() {
			defer n.watchers.Done()
			defer close(watchDone)
			failover = n.watchFailover(start, st.Term, func(p *Process) bool { return p == excluded && !healed.Load() })
		}()
	} else {
		close(watchDone)
	}

	time.Sleep(hold)
	if err := heal(); err != nil {
		n.errorf("healing %s on %s: %v", kind, ev.Targets, err)
	}
	healed.Store(true)
	ev.End = n.now()
	n.waitRecovered(kind)
	<-watchDone
	if failover > 0 {
		ev.Failover = failover
		n.mu.Lock()
		n.failovers = append(n.failovers, failover)
		n.mu.Unlock()
		n.logf("nemesis: new leader %v after %s", failover.Round(time.Millisecond), kind)
	}
	n.mu.Lock()
	n.events = append(n.events, ev)
	n.mu.Unlock()
}

// watchFailover polls the servers (but those skip says are frozen or
// killed) until one leads, ready, in a term after term; it returns the
// time since start, or 0 when none did within the recovery bound.
func (n *nemesis) watchFailover(start time.Time, term uint64, skip func(*Process) bool) time.Duration {
	deadline := start.Add(n.recover)
	for time.Now().Before(deadline) {
		for _, p := range n.c.Servers {
			if skip(p) || !p.Running() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			st, err := n.c.Status(ctx, p)
			cancel()
			if err == nil && st.State == "Leader" && st.Ready && st.Term > term {
				return time.Since(start)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return 0
}

// waitRecovered waits until every server is ready and one leads; false
// (and failed closed) when they did not within the recovery bound.
func (n *nemesis) waitRecovered(after faultKind) bool {
	ctx, cancel := context.WithTimeout(context.Background(), n.recover)
	defer cancel()
	err := n.c.WaitReady(ctx, n.c.Servers...)
	if err == nil {
		_, err = n.c.Leader(ctx)
	}
	if err != nil {
		n.errorf("not recovered within %v after healing %s: %v", n.recover, after, err)
		n.failedOnce.Do(func() { close(n.failed) })
		return false
	}
	return true
}

// healAll undoes every fault: partitions removed, frozen processes thawed,
// killed ones started.
func (n *nemesis) healAll() {
	if n.parts != nil {
		if err := n.parts.heal(); err != nil {
			n.errorf("healing partitions: %v", err)
		}
	}
	for _, p := range n.c.All() {
		if p.Running() {
			_ = p.Signal(syscall.SIGCONT)
		} else if err := p.Start(); err != nil {
			n.errorf("restarting %s: %v", p.Name, err)
		}
	}
}

// summary lists the faults injected, by kind.
func (n *nemesis) summary() (map[faultKind]int, []time.Duration, []nemesisEvent, []string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	faults := map[faultKind]int{}
	for k, v := range n.faults {
		faults[k] = v
	}
	return faults, append([]time.Duration(nil), n.failovers...), append([]nemesisEvent(nil), n.events...), append([]string(nil), n.errs...)
}

// formatFaults writes fault counts as kind=N, sorted by kind.
func formatFaults(faults map[faultKind]int) string {
	var keys []string
	total := 0
	for k, v := range faults {
		keys = append(keys, string(k))
		total += v
	}
	sort.Strings(keys)
	parts := []string{fmt.Sprintf("total=%d", total)}
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%d", k, faults[faultKind(k)]))
	}
	return strings.Join(parts, " ")
}
