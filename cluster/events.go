package cluster

import (
	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/events"
	"github.com/dmsc/dmsc/fsm"
)

// SubscribeEvents reads this server's event buffer after index after (0:
// from now on). Only servers have a replica, and so events.
func (n *Node) SubscribeEvents(after uint64) (*events.Subscription, error) {
	if n.raft == nil {
		return nil, ErrNotServer
	}
	if err := n.running(); err != nil {
		return nil, err
	}
	return n.fsm.Events().Subscribe(after)
}

// watchLeader publishes a Leader event each time this server sees a new
// leader, until the node stops.
func (n *Node) watchLeader() {
	ch := make(chan raft.Observation, 16)
	obs := raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.raft.RegisterObserver(obs)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		defer n.raft.DeregisterObserver(obs)
		for {
			select {
			case o := <-ch:
				lo := o.Data.(raft.LeaderObservation)
				if lo.LeaderID == "" {
					continue
				}
				n.fsm.PublishLocal(fsm.Event{Topic: fsm.TopicLeader, Type: fsm.EventElected, Key: string(lo.LeaderID),
					Payload: fsm.LeaderEvent{ID: string(lo.LeaderID), Address: string(lo.LeaderAddr)}})
			case <-n.shutdownCh:
				return
			}
		}
	}()
}
