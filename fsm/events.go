package fsm

// Events: what a command changed, as the event stream reports it. A
// state with events on (EnableEvents) records an Event at each change a
// command makes, in the order it makes them, and the caller takes them
// after the command (TakeEvents). They are derived from the log alone,
// so every replica that applies the same entries records the same events
// with the same indexes; they are not part of the state and not in
// snapshots. A refused command records none.

// Topic is what an event is about.
type Topic string

// Topics.
const (
	TopicAllocation Topic = "Allocation"
	TopicDevice     Topic = "Device"
	TopicHost       Topic = "Host"
	TopicPolicy     Topic = "Policy"
	TopicQueue      Topic = "Queue"
	// TopicLeader events are not recorded by the state: each server
	// reports the leader changes it observes.
	TopicLeader Topic = "Leader"
)

// Topics lists every topic.
var Topics = []Topic{TopicAllocation, TopicDevice, TopicHost, TopicPolicy, TopicQueue, TopicLeader}

// Valid reports whether t is a known topic.
func (t Topic) Valid() bool {
	for _, k := range Topics {
		if t == k {
			return true
		}
	}
	return false
}

// Event types beyond an allocation's final status (Released, Expired,
// TimedOut, Preempted, Lost, Failed, Cancelled, Drained name those).
const (
	EventCreated = "created"
	EventPlaced  = "placed"
	EventQueued  = "queued"
	// EventReserved: a waiting gang holds hosts (reserve.go).
	EventReserved   = "reserved"
	EventRenewed    = "renewed"
	EventRegistered = "registered"
	EventUpdated    = "updated"
	EventRemoved    = "removed"
	EventDeleted    = "deleted"
	EventEnqueued   = "enqueued"
	EventDequeued   = "dequeued"
	EventElected    = "elected"
)

// Event is one change. Payload is a copy of what changed, taken when it
// changed: *Allocation (topics Allocation and Queue), Device, Host,
// PolicyEvent, or LeaderEvent.
type Event struct {
	Topic     Topic
	Type      string
	Key       string
	Namespace string
	Index     uint64
	Payload   any
}

// PolicyEvent is the payload of a Policy event: the policy of a device
// type, or of a pool (Pool set; a deleted pool policy has a zero Config).
type PolicyEvent struct {
	DeviceType DeviceType
	Pool       string
	Config     PolicyConfig
}

// LeaderEvent is the payload of a Leader event.
type LeaderEvent struct {
	ID      string
	Address string
}

// EnableEvents makes the state record events from now on.
func (s *State) EnableEvents() { s.eventsOn = true }

// TakeEvents returns the events recorded since the last call and forgets
// them.
func (s *State) TakeEvents() []Event {
	ev := s.events
	s.events = nil
	return ev
}

func (s *State) emit(t Topic, typ, key, ns string, payload any) {
	s.events = append(s.events, Event{Topic: t, Type: typ, Key: key, Namespace: ns, Index: s.last, Payload: payload})
}

// emitAlloc records an Allocation event with a copy of a as it is now.
func (s *State) emitAlloc(a *Allocation, typ string) {
	if s.eventsOn {
		s.emit(TopicAllocation, typ, a.ID, a.Namespace, a.clone())
	}
}

// emitQueue records a Queue event: a entered or left the queue.
func (s *State) emitQueue(a *Allocation, typ string) {
	if s.eventsOn {
		s.emit(TopicQueue, typ, a.ID, a.Namespace, a.clone())
	}
}

func (s *State) emitDevice(d *Device, typ string) {
	if s.eventsOn {
		s.emit(TopicDevice, typ, d.ID, "", s.deviceView(d))
	}
}

func (s *State) emitHost(h *Host, typ string) {
	if s.eventsOn {
		s.emit(TopicHost, typ, h.ID, "", hostView(h))
	}
}

func (s *State) emitPolicy(t DeviceType, pool string, cfg PolicyConfig, typ string) {
	if s.eventsOn {
		key := "type:" + string(t)
		if pool != "" {
			key = "pool:" + pool
		}
		s.emit(TopicPolicy, typ, key, "", PolicyEvent{DeviceType: t, Pool: pool, Config: cfg})
	}
}
