package fsm_test

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/dmsc/dmsc/fsm"
)

// eventCheck follows the events of TestRandomLog's primary: every
// allocation's events must make a lifecycle (created, then queued or
// placed or failed, ...), each event's payload must agree with its type,
// and the last event of an allocation a command touched must agree with
// the state after it.
type eventCheck struct {
	last map[string]string // allocation ID → its last Allocation event type
	// queued is the allocations the Queue topic has in the queue.
	queued map[string]bool
}

// appliedAnew reports whether the command at index idx took effect: it is
// not a repeated request ID, and it succeeded or was refused only for
// capacity or quota (which records a failed allocation).
func appliedAnew(res fsm.Result, idx uint64) bool {
	return res.Index == idx && (res.Err == nil || errors.Is(res.Err, fsm.ErrNoCapacity) || errors.Is(res.Err, fsm.ErrQuotaExceeded))
}

func newEventCheck() *eventCheck {
	return &eventCheck{last: map[string]string{}, queued: map[string]bool{}}
}

// finalTypes are the Allocation event types of an allocation's end, with
// the types the one before may have.
var finalTypes = map[string][]string{
	string(fsm.Released):  {fsm.EventPlaced, fsm.EventRenewed, fsm.EventPreempting, fsm.EventSpared},
	string(fsm.Expired):   {fsm.EventPlaced, fsm.EventRenewed, fsm.EventPreempting, fsm.EventSpared},
	string(fsm.Preempted): {fsm.EventPlaced, fsm.EventRenewed, fsm.EventPreempting, fsm.EventSpared},
	string(fsm.Lost):      {fsm.EventPlaced, fsm.EventRenewed, fsm.EventPreempting, fsm.EventSpared},
	string(fsm.Drained):   {fsm.EventPlaced, fsm.EventRenewed, fsm.EventPreempting, fsm.EventSpared},
	string(fsm.TimedOut):  {fsm.EventQueued, fsm.EventReserved},
	string(fsm.Cancelled): {fsm.EventQueued, fsm.EventReserved},
	string(fsm.Failed):    {fsm.EventCreated},
}

// after lists the types an Allocation event may follow ("" for none).
var after = map[string][]string{
	fsm.EventCreated:    {""}, // or any final type: an ID the history forgot
	fsm.EventQueued:     {fsm.EventCreated},
	fsm.EventPlaced:     {fsm.EventCreated, fsm.EventQueued, fsm.EventReserved},
	fsm.EventReserved:   {fsm.EventQueued, fsm.EventReserved},
	fsm.EventRenewed:    {fsm.EventPlaced, fsm.EventRenewed, fsm.EventPreempting, fsm.EventSpared},
	fsm.EventPreempting: {fsm.EventPlaced, fsm.EventRenewed, fsm.EventPreempting, fsm.EventSpared},
	fsm.EventSpared:     {fsm.EventPreempting},
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// step checks the events of the command at idx: refused (or answered from
// the request cache) when applied is false.
func (c *eventCheck) step(s *fsm.State, idx uint64, applied bool, evs []fsm.Event) error {
	if !applied && len(evs) > 0 {
		return fmt.Errorf("a command that changed nothing recorded %d events, the first %+v", len(evs), evs[0])
	}
	touched := map[string]bool{}
	for _, ev := range evs {
		if ev.Index != idx {
			return fmt.Errorf("event %s/%s of %s has index %d, want %d", ev.Topic, ev.Type, ev.Key, ev.Index, idx)
		}
		switch ev.Topic {
		case fsm.TopicAllocation:
			a, ok := ev.Payload.(*fsm.Allocation)
			if !ok || a.ID != ev.Key || a.Namespace != ev.Namespace {
				return fmt.Errorf("allocation event %s of %s: payload %T %+v", ev.Type, ev.Key, ev.Payload, ev.Payload)
			}
			prev := c.last[ev.Key]
			if prevs, final := finalTypes[ev.Type]; final {
				if !contains(prevs, prev) {
					return fmt.Errorf("allocation %s: %s after %q", ev.Key, ev.Type, prev)
				}
				if string(a.Status) != ev.Type {
					return fmt.Errorf("allocation %s: %s event with status %s", ev.Key, ev.Type, a.Status)
				}
			} else {
				prevs, known := after[ev.Type]
				_, prevFinal := finalTypes[prev]
				switch {
				case !known:
					return fmt.Errorf("allocation %s: unknown event type %s", ev.Key, ev.Type)
				case ev.Type == fsm.EventCreated && (prev == "" || prevFinal):
				case !contains(prevs, prev):
					return fmt.Errorf("allocation %s: %s after %q", ev.Key, ev.Type, prev)
				}
				want := map[string]fsm.AllocStatus{fsm.EventCreated: fsm.Pending, fsm.EventQueued: fsm.Pending, fsm.EventReserved: fsm.Pending,
					fsm.EventPlaced: fsm.Active, fsm.EventRenewed: fsm.Active,
					fsm.EventPreempting: fsm.Active, fsm.EventSpared: fsm.Active}[ev.Type]
				if a.Status != want {
					return fmt.Errorf("allocation %s: %s event with status %s", ev.Key, ev.Type, a.Status)
				}
			}
			c.last[ev.Key] = ev.Type
			touched[ev.Key] = true
		case fsm.TopicQueue:
			switch {
			case ev.Type == fsm.EventEnqueued && !c.queued[ev.Key]:
				c.queued[ev.Key] = true
			case ev.Type == fsm.EventDequeued && c.queued[ev.Key]:
				delete(c.queued, ev.Key)
			default:
				return fmt.Errorf("queue event %s of %s (queued: %v)", ev.Type, ev.Key, c.queued[ev.Key])
			}
		case fsm.TopicDevice, fsm.TopicHost, fsm.TopicPolicy:
			if ev.Key == "" || ev.Payload == nil {
				return fmt.Errorf("%s event %s without key or payload", ev.Topic, ev.Type)
			}
		default:
			return fmt.Errorf("the state recorded a %s event", ev.Topic)
		}
	}
	for id := range touched {
		a, ok := s.Allocation(id)
		if !ok {
			if _, final := finalTypes[c.last[id]]; final {
				continue // ended and already out of the history
			}
			return fmt.Errorf("allocation %s: last event %s, and the state does not know it", id, c.last[id])
		}
		want := fsm.AllocStatus(c.last[id])
		switch c.last[id] {
		case fsm.EventCreated, fsm.EventQueued, fsm.EventReserved:
			want = fsm.Pending
		case fsm.EventPlaced, fsm.EventRenewed, fsm.EventPreempting, fsm.EventSpared:
			want = fsm.Active
		}
		if a.Status != want {
			return fmt.Errorf("allocation %s: last event %s, status %s in the state", id, c.last[id], a.Status)
		}
	}
	if got, want := len(c.queued), len(s.Queue()); got != want {
		return fmt.Errorf("the Queue topic has %d allocations queued, the state %d", got, want)
	}
	return nil
}

// eventsJSON encodes events for comparison between replicas.
func eventsJSON(evs []fsm.Event) string {
	b, err := json.Marshal(evs)
	if err != nil {
		return "unencodable events: " + err.Error()
	}
	return string(b)
}
