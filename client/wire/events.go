package wire

import "encoding/json"

// Event topics, as GET /v1/event/stream names them.
const (
	TopicAllocation = "Allocation"
	TopicDevice     = "Device"
	TopicHost       = "Host"
	TopicPolicy     = "Policy"
	TopicQueue      = "Queue"
	TopicLeader     = "Leader"
)

// Error codes of the event stream.
const (
	// CodeIndexTooOld: events after the index asked for are no longer
	// buffered on this node (410). Read the state, then stream from the
	// index of that read.
	CodeIndexTooOld = "index_too_old"
	// CodeSlowConsumer ends a stream whose reader fell behind by more than
	// the node buffers.
	CodeSlowConsumer = "slow_consumer"
	// CodeStreamReset ends a stream when the node's replica was replaced
	// by a snapshot: events before it are not known here.
	CodeStreamReset = "stream_reset"
)

// EventBatch is one line of the event stream: the events of one log
// index that the request asked for and may see. A line with neither
// index nor events is a heartbeat; a line with an error is the last.
type EventBatch struct {
	Index  uint64  `json:"index,omitempty"`
	Events []Event `json:"events,omitempty"`
	Error  *Error  `json:"error,omitempty"`
}

// Heartbeat reports whether the line is a heartbeat.
func (b EventBatch) Heartbeat() bool { return b.Index == 0 && len(b.Events) == 0 && b.Error == nil }

// Event is one change. Payload is, by topic: Allocation and Queue an
// Allocation, Device a Device, Host a Host, Policy a PolicyEvent, Leader
// a LeaderEvent, each as it was right after the change.
type Event struct {
	Topic     string          `json:"topic"`
	Type      string          `json:"type"`
	Key       string          `json:"key"`
	Namespace string          `json:"namespace,omitempty"`
	Index     uint64          `json:"index"`
	Payload   json.RawMessage `json:"payload"`
}

// PolicyEvent is the payload of a Policy event: a device type's policy,
// or a pool's (Pool set; a deleted pool policy has an empty policy).
type PolicyEvent struct {
	DeviceType DeviceType   `json:"device_type,omitempty"`
	Pool       string       `json:"pool,omitempty"`
	Config     PolicyConfig `json:"config"`
}

// LeaderEvent is the payload of a Leader event: the leader the serving
// node sees elected.
type LeaderEvent struct {
	ID      string `json:"id"`
	Address string `json:"address"`
}
