package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/dmsc/dmsc/events"
	"github.com/dmsc/dmsc/fsm"
)

// A follower's event stream goes on through a leader change: the events
// of writes before and after the old leader was killed arrive in log
// order, each once, with the new leader's election among them; and every
// server recorded the same events for the same log.
func TestEventsThroughLeaderChange(t *testing.T) {
	tc := newTestCluster(t, nil)
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	var watcher, survivor *Node
	for _, n := range followers(leader, nodes...) {
		if watcher == nil {
			watcher = n
		} else {
			survivor = n
		}
	}
	sub, err := watcher.SubscribeEvents(0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := survivor.SubscribeEvents(0)
	if err != nil {
		t.Fatal(err)
	}
	mustApply(t, leader, staticHost("h1", gpu("g1", 80), gpu("g2", 80), gpu("g3", 80), gpu("g4", 80)))
	var ids []string
	for range 2 {
		ids = append(ids, mustApply(t, leader, gpuRequest(40)).Allocation.ID)
	}
	tc.crash(leader.cfg.NodeID)
	next := tc.waitLeader(watcher, survivor)
	for range 2 {
		ids = append(ids, mustApply(t, next, gpuRequest(40)).Allocation.ID)
	}

	collect := func(n *Node, sub *events.Subscription) (log []string, elected []string) {
		t.Helper()
		ctx := ctxT(t, 15*time.Second)
		created := map[string]int{}
		var last uint64
		for len(created) < len(ids) {
			segs, err := sub.Next(ctx)
			if err != nil {
				t.Fatalf("%s after %d allocations: %v", n.cfg.NodeID, len(created), err)
			}
			var batches []events.Batch
			for _, sg := range segs {
				batches = append(batches, sg.Batches...)
			}
			for _, b := range batches {
				if b.Index < last {
					t.Fatalf("%s: batch %d after %d", n.cfg.NodeID, b.Index, last)
				}
				last = b.Index
				for _, ev := range b.Events {
					switch {
					case ev.Topic == fsm.TopicLeader:
						elected = append(elected, ev.Key)
						continue
					case ev.Topic == fsm.TopicAllocation && ev.Type == fsm.EventCreated:
						created[ev.Key]++
						if created[ev.Key] > 1 {
							t.Fatalf("%s: allocation %s created twice", n.cfg.NodeID, ev.Key)
						}
					}
					log = append(log, fmt.Sprintf("%d %s/%s/%s", ev.Index, ev.Topic, ev.Type, ev.Key))
				}
			}
		}
		for _, id := range ids {
			if created[id] != 1 {
				t.Fatalf("%s: no event for allocation %s", n.cfg.NodeID, id)
			}
		}
		return log, elected
	}
	log1, elected := collect(watcher, sub)
	log2, _ := collect(survivor, other)
	if fmt.Sprint(log1) != fmt.Sprint(log2) {
		t.Fatalf("two servers recorded other events for the same log:\n%v\n%v", log1, log2)
	}
	if len(elected) == 0 || elected[len(elected)-1] != next.cfg.NodeID {
		t.Fatalf("%s saw leaders %v, want %s last", watcher.cfg.NodeID, elected, next.cfg.NodeID)
	}
}
