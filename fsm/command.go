package fsm

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// CommandType is the type byte that starts every encoded command.
type CommandType uint8

// Command types. The numbers are part of the log format: never reuse one.
const (
	RegisterHostType     CommandType = 1
	RemoveHostType       CommandType = 2
	SetHostStatusType    CommandType = 3
	SetDeviceStatusType  CommandType = 4
	AllocateType         CommandType = 5
	ReleaseType          CommandType = 6
	RenewType            CommandType = 7
	CancelType           CommandType = 8
	SetPolicyType        CommandType = 9
	SetRetentionType     CommandType = 10
	TickType             CommandType = 11
	SetServerRemovedType CommandType = 12
	ACLBootstrapType     CommandType = 13
	ACLPolicyUpsertType  CommandType = 14
	ACLPolicyDeleteType  CommandType = 15
	ACLTokenUpsertType   CommandType = 16
	ACLTokenDeleteType   CommandType = 17
	DrainHostType        CommandType = 18
	SetQuotaType         CommandType = 19
	SetQueueConfigType   CommandType = 20
)

// Meta is carried by every command: the client's request ID (a retried
// command with a known ID returns the first result), the namespace the
// command acts in (allocations; request IDs are scoped by it) and the time
// the leader stamped on it, in Unix nanoseconds. Digest is the command's
// digest for the request-ID check (commandDigest), which the leader
// computes once before proposing (Stamp) so that the replicas need not;
// a replica computes it for an entry without one.
type Meta struct {
	RequestID string `json:"request_id,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Time      int64  `json:"time"`
	Digest    string `json:"digest,omitempty"`
}

func (m *Meta) meta() *Meta { return m }

// Command is one replicated write.
type Command interface {
	Type() CommandType
	meta() *Meta
}

// RegisterHost adds a host with its devices, or replaces the inventory of a
// known host. Devices that disappear or change while allocated lose their
// allocations.
type RegisterHost struct {
	Meta
	Host    HostSpec     `json:"host"`
	Devices []DeviceSpec `json:"devices"`
	// InventoryHash is the hash of the inventory the leader pulled from
	// the host (transport.InventoryHash); the host record keeps it. Empty
	// for a registration through the API, which so clears it.
	InventoryHash string `json:"inventory_hash,omitempty"`
}

// RemoveHost forgets a host and its devices; its allocations are lost.
type RemoveHost struct {
	Meta
	HostID string `json:"host_id"`
}

// SetHostStatus marks a host up or down. Down takes its devices offline and
// its active allocations are lost.
type SetHostStatus struct {
	Meta
	HostID string `json:"host_id"`
	Up     bool   `json:"up"`
}

// DrainHost starts or ends the drain of a host (Enable false ends it). A
// drained host takes no new work; its active allocations keep their
// devices until released, or until Deadline after the command's time,
// when they end as drained. A zero Deadline waits for them however long
// they run. Draining a drained host again sets its deadline anew.
type DrainHost struct {
	Meta
	HostID   string        `json:"host_id"`
	Enable   bool          `json:"enable"`
	Deadline time.Duration `json:"deadline,omitempty"`
}

// SetDeviceStatus drains, marks unhealthy, or makes a device available.
type SetDeviceStatus struct {
	Meta
	DeviceID string       `json:"device_id"`
	Status   DeviceStatus `json:"status"`
}

// Allocate asks for devices. AllocationID is the new allocation's ID, a
// random UUID drawn by the node that took the request (cluster.Node.Apply),
// so IDs stay unique across snapshot restores and differ between clusters.
// An entry without one (older logs, tests, replays) gets an ID derived from
// its log index.
type Allocate struct {
	Meta
	AllocationID string  `json:"allocation_id,omitempty"`
	Request      Request `json:"request"`
}

// Release gives back an active allocation.
type Release struct {
	Meta
	AllocationID string `json:"allocation_id"`
}

// Renew extends an active allocation's lease by TTL (or its request's
// lease TTL when zero), counted from the command's time.
type Renew struct {
	Meta
	AllocationID string        `json:"allocation_id"`
	TTL          time.Duration `json:"ttl,omitempty"`
}

// Cancel withdraws a pending request.
type Cancel struct {
	Meta
	AllocationID string `json:"allocation_id"`
}

// SetPolicy sets the policy of a device type, or of a pool when Pool is set.
// An empty Policy with a Pool removes the pool's override.
type SetPolicy struct {
	Meta
	DeviceType DeviceType   `json:"type,omitempty"`
	Pool       string       `json:"pool,omitempty"`
	Config     PolicyConfig `json:"config"`
}

// SetRetention bounds the history by count and age.
type SetRetention struct {
	Meta
	Retention Retention `json:"retention"`
}

// Tick advances time: leases and queue deadlines that are due expire.
type Tick struct {
	Meta
}

// SetServerRemoved records that an operator removed a server from the
// Raft configuration (Removed), so that the leader does not add it back
// while the operator wants it gone, or lifts that (the server may then
// rejoin, first as a non-voter).
type SetServerRemoved struct {
	Meta
	ServerID string `json:"server_id"`
	Removed  bool   `json:"removed"`
}

func (*RegisterHost) Type() CommandType     { return RegisterHostType }
func (*RemoveHost) Type() CommandType       { return RemoveHostType }
func (*SetHostStatus) Type() CommandType    { return SetHostStatusType }
func (*SetDeviceStatus) Type() CommandType  { return SetDeviceStatusType }
func (*DrainHost) Type() CommandType        { return DrainHostType }
func (*Allocate) Type() CommandType         { return AllocateType }
func (*Release) Type() CommandType          { return ReleaseType }
func (*Renew) Type() CommandType            { return RenewType }
func (*Cancel) Type() CommandType           { return CancelType }
func (*SetPolicy) Type() CommandType        { return SetPolicyType }
func (*SetRetention) Type() CommandType     { return SetRetentionType }
func (*Tick) Type() CommandType             { return TickType }
func (*SetServerRemoved) Type() CommandType { return SetServerRemovedType }
func (*ACLBootstrap) Type() CommandType     { return ACLBootstrapType }
func (*ACLPolicyUpsert) Type() CommandType  { return ACLPolicyUpsertType }
func (*ACLPolicyDelete) Type() CommandType  { return ACLPolicyDeleteType }
func (*ACLTokenUpsert) Type() CommandType   { return ACLTokenUpsertType }
func (*ACLTokenDelete) Type() CommandType   { return ACLTokenDeleteType }

// newCommand returns an empty command of type t, or nil if t is unknown.
func newCommand(t CommandType) Command {
	switch t {
	case RegisterHostType:
		return &RegisterHost{}
	case RemoveHostType:
		return &RemoveHost{}
	case SetHostStatusType:
		return &SetHostStatus{}
	case SetDeviceStatusType:
		return &SetDeviceStatus{}
	case DrainHostType:
		return &DrainHost{}
	case SetQuotaType:
		return &SetQuota{}
	case SetQueueConfigType:
		return &SetQueueConfig{}
	case AllocateType:
		return &Allocate{}
	case ReleaseType:
		return &Release{}
	case RenewType:
		return &Renew{}
	case CancelType:
		return &Cancel{}
	case SetPolicyType:
		return &SetPolicy{}
	case SetRetentionType:
		return &SetRetention{}
	case TickType:
		return &Tick{}
	case SetServerRemovedType:
		return &SetServerRemoved{}
	case ACLBootstrapType:
		return &ACLBootstrap{}
	case ACLPolicyUpsertType:
		return &ACLPolicyUpsert{}
	case ACLPolicyDeleteType:
		return &ACLPolicyDelete{}
	case ACLTokenUpsertType:
		return &ACLTokenUpsert{}
	case ACLTokenDeleteType:
		return &ACLTokenDelete{}
	case TestNoopType:
		if TestNoopEnabled() {
			return &TestNoop{}
		}
	}
	return nil
}

// Stamp sets the command's time and, when it has a request ID, its
// digest (the leader does this before proposing), and returns the
// command. A command changed after Stamp must be stamped again.
func Stamp(c Command, t time.Time) Command {
	m := c.meta()
	m.Time = t.UnixNano()
	m.Digest = ""
	if m.RequestID != "" {
		m.Digest = commandDigest(c)
	}
	return c
}

// RequestIDOf returns the command's request ID.
func RequestIDOf(c Command) string { return c.meta().RequestID }

// SetNamespace sets the namespace the command acts in.
func SetNamespace(c Command, ns string) { c.meta().Namespace = ns }

// NamespaceOf is the namespace a command acts in: its own, else the
// default.
func NamespaceOf(c Command) string {
	if ns := c.meta().Namespace; ns != "" {
		return ns
	}
	return DefaultNamespace
}

// SetRequestID sets the command's request ID.
func SetRequestID(c Command, id string) { c.meta().RequestID = id }

// Encode writes a command as its type byte followed by its JSON payload.
func Encode(c Command) ([]byte, error) {
	if b, ok := c.(*Batch); ok {
		return encodeBatch(b)
	}
	if Batchable(c) {
		if out, ok := encodeFast(append(make([]byte, 0, 512), byte(c.Type())), c); ok {
			return out, nil
		}
	}
	payload, err := json.Marshal(c)
	if err != nil {
		return nil, errf(ErrInvalid, "encode command: %v", err)
	}
	out := make([]byte, 0, len(payload)+1)
	out = append(out, byte(c.Type()))
	return append(out, payload...), nil
}

// encodePayload is c's payload as encoding/json writes it.
func encodePayload(c Command) ([]byte, error) {
	if b, ok := encodeFast(nil, c); ok {
		return b, nil
	}
	return json.Marshal(c)
}

// decodeOptions make the payload decoder read what encoding/json writes:
// a time.Duration is a number of nanoseconds.
var decodeOptions = jsonv1.FormatDurationAsNano(true)

// Decode reads a command written by Encode. An unknown type byte gives a
// *NeedsUpgradeError, which matches ErrUnknownCommand: the node must stop
// rather than diverge.
//
// Every replica decodes every entry, so the payload is read with the
// implementation of encoding/json/v2 (github.com/go-json-experiment/json),
// about three times faster than encoding/json on the commands of the
// write path. It is stricter: member names must match exactly, appear
// once and hold valid UTF-8, which is always so of what Encode writes.
// What Encode writes decodes to the same command under both (TestRandomLog
// and FuzzDecode compare them), so servers of builds before and after this
// decoder apply a log alike.
func Decode(b []byte) (Command, error) {
	return decodeWith(b, unmarshalCommand)
}

// unmarshalCommand reads a command's payload: the plain allocation
// writes directly (decodeFast), the rest with encoding/json/v2.
func unmarshalCommand(payload []byte, c any) error {
	if decodeFast(payload, c) {
		return nil
	}
	return jsonv2.Unmarshal(payload, c, decodeOptions)
}

// decodeWith reads a command with the given JSON decoder.
func decodeWith(b []byte, unmarshal func([]byte, any) error) (Command, error) {
	if len(b) == 0 {
		return nil, errf(ErrInvalid, "empty command")
	}
	if CommandType(b[0]) == BatchType {
		return decodeBatch(b[1:], unmarshal)
	}
	c := newCommand(CommandType(b[0]))
	if c == nil {
		return nil, &NeedsUpgradeError{Type: CommandType(b[0])}
	}
	if err := unmarshal(b[1:], c); err != nil {
		return nil, errf(ErrInvalid, "decode command type %d: %v", b[0], err)
	}
	return c, nil
}

// commandDigest identifies a command for the request-ID check: its type
// and payload, without the leader's time, the request ID itself and the
// digest, so a retry of the same request matches and another request
// does not. An Allocate's allocation ID is left out too: the node that
// takes a request draws it, so a retry through another node carries
// another one, and must still get the first answer. (Entries without an
// ID hash as before.) A server that does not know Meta.Digest computes
// the same value, since the field is left out.
func commandDigest(c Command) string {
	m := c.meta()
	saved := *m
	m.Time, m.RequestID, m.Digest = 0, "", ""
	var allocID string
	if a, ok := c.(*Allocate); ok {
		allocID, a.AllocationID = a.AllocationID, ""
	}
	payload, err := encodePayload(c)
	*m = saved
	if a, ok := c.(*Allocate); ok {
		a.AllocationID = allocID
	}
	if err != nil {
		// Unencodable (NaN, ±Inf): validation refuses the command anyway.
		return ""
	}
	h := sha256.New()
	h.Write([]byte{byte(c.Type())})
	h.Write(payload)
	return hex.EncodeToString(h.Sum(nil)[:16])
}
