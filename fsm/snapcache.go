package fsm

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
)

// The head of a snapshot (hosts, devices, live allocations) is captured
// under the FSM's lock, by Raft's Snapshot and by the state hash: an
// apply stall of that length. With 100,000 devices most of it would be
// encoding records that did not change since the last time and sorting
// IDs that did not change either. So the state keeps each host's,
// device's and live allocation's framed record (length, then bytes)
// until it changes, and the sorted IDs of the hosts and of the devices
// until one joins or leaves; a captured head is a list of references to
// those records, copied by nobody: a kept record is never written to,
// only replaced.
//
// A device's record is dropped where the device changes (unindex and
// reindex bracket every change, removal included), a host's where the
// host changes (registerHost, setHostStatus, removeHost), the orders
// where the maps gain or lose a key. A live allocation's record is kept
// with the ModifyIndex it was encoded at: every change of an allocation
// moves its ModifyIndex. CheckInvariants compares every kept record and
// order with a fresh one. The records live here, not in the hosts,
// devices and allocations, whose copies readers make while a capture
// may be filling them.

// headCache is what the state keeps for the next capture. Commands change
// it under the FSM's write lock; readers that hold the read lock together
// may capture together, so mu is held while a capture reads or fills it.
type headCache struct {
	mu sync.Mutex
	// hostIDs and deviceIDs are sorted; nil is stale.
	hostIDs, deviceIDs []string
	hosts, devices     map[string][]byte
	live               map[string]liveRecord
}

// liveRecord is a live allocation's framed record as of its ModifyIndex at.
type liveRecord struct {
	b  []byte
	at uint64
}

func newHeadCache() *headCache {
	return &headCache{hosts: map[string][]byte{}, devices: map[string][]byte{}, live: map[string]liveRecord{}}
}

// framed is the record f encodes, preceded by its length.
func framed(f func(*enc)) []byte {
	var e enc
	f(&e)
	out := binary.AppendUvarint(make([]byte, 0, len(e.b)+binary.MaxVarintLen32), uint64(len(e.b)))
	return append(out, e.b...)
}

// encodeHead lists the format byte, the head record, the hosts, the
// devices and the live allocations, with their counts, as the pieces a
// snapshot starts with, in order. The records are the kept ones, shared:
// nobody writes to them.
func (s *State) encodeHead() ([][]byte, error) {
	cfg, err := json.Marshal(s.snapshotConfig())
	if err != nil {
		return nil, err
	}
	c := s.head
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hostIDs == nil {
		c.hostIDs = sortedKeys(s.hosts)
	}
	if c.deviceIDs == nil {
		c.deviceIDs = sortedKeys(s.devices)
	}
	live := sortedKeys(s.allocs)
	out := make([][]byte, 0, 5+len(c.hostIDs)+len(c.deviceIDs)+len(live))
	out = append(out, []byte{SnapshotVersion}, framed(func(e *enc) {
		e.varint(s.now)
		e.uvarint(s.seq)
		e.uvarint(s.last)
		e.b = append(e.b, cfg...)
	}))
	count := func(n int) { out = append(out, binary.AppendUvarint(nil, uint64(n))) }
	count(len(c.hostIDs))
	for _, id := range c.hostIDs {
		b := c.hosts[id]
		if b == nil {
			h := s.hosts[id]
			b = framed(func(e *enc) { e.host(h) })
			c.hosts[id] = b
		}
		out = append(out, b)
	}
	count(len(c.deviceIDs))
	for _, id := range c.deviceIDs {
		b := c.devices[id]
		if b == nil {
			d := s.devices[id]
			b = framed(func(e *enc) { e.device(d) })
			c.devices[id] = b
		}
		out = append(out, b)
	}
	// The live records are kept anew each time, so that those of
	// allocations that ended leave.
	count(len(live))
	kept := make(map[string]liveRecord, len(live))
	for _, id := range live {
		a := s.allocs[id]
		r, ok := c.live[id]
		if !ok || r.at != a.ModifyIndex {
			r = liveRecord{b: framed(func(e *enc) { e.alloc(a) }), at: a.ModifyIndex}
		}
		kept[id] = r
		out = append(out, r.b)
	}
	c.live = kept
	return out, nil
}

// checkHeadCache compares the kept records and orders with fresh ones.
func (s *State) checkHeadCache() error {
	c := s.head
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hostIDs != nil && !slices.Equal(c.hostIDs, sortedKeys(s.hosts)) {
		return fmt.Errorf("the kept order of the hosts is stale")
	}
	if c.deviceIDs != nil && !slices.Equal(c.deviceIDs, sortedKeys(s.devices)) {
		return fmt.Errorf("the kept order of the devices is stale")
	}
	for _, id := range sortedKeys(c.hosts) {
		h := s.hosts[id]
		if h == nil {
			return fmt.Errorf("host %s: a snapshot record is kept for a host that left", id)
		}
		if !bytes.Equal(c.hosts[id], framed(func(e *enc) { e.host(h) })) {
			return fmt.Errorf("host %s: the kept snapshot record is stale", id)
		}
	}
	for _, id := range sortedKeys(c.devices) {
		d := s.devices[id]
		if d == nil {
			return fmt.Errorf("device %s: a snapshot record is kept for a device that left", id)
		}
		if !bytes.Equal(c.devices[id], framed(func(e *enc) { e.device(d) })) {
			return fmt.Errorf("device %s: the kept snapshot record is stale", id)
		}
	}
	for _, id := range sortedKeys(c.live) {
		a, r := s.allocs[id], c.live[id]
		if a != nil && r.at == a.ModifyIndex && !bytes.Equal(r.b, framed(func(e *enc) { e.alloc(a) })) {
			return fmt.Errorf("allocation %s changed without a new ModifyIndex (%d): the kept snapshot record is stale", id, a.ModifyIndex)
		}
	}
	return nil
}
