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
	out = appendKept(out, c.hostIDs, c.hosts, s.hosts, (*enc).host)
	count(len(c.deviceIDs))
	out = appendKept(out, c.deviceIDs, c.devices, s.devices, (*enc).device)
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

// appendKept appends the kept records of the objects ids names, encoding
// and keeping those that have none.
func appendKept[T any](out [][]byte, ids []string, kept map[string][]byte, objs map[string]T, encode func(*enc, T)) [][]byte {
	for _, id := range ids {
		b := kept[id]
		if b == nil {
			o := objs[id]
			b = framed(func(e *enc) { encode(e, o) })
			kept[id] = b
		}
		out = append(out, b)
	}
	return out
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
	if err := checkKept("host", c.hosts, s.hosts, (*enc).host); err != nil {
		return err
	}
	if err := checkKept("device", c.devices, s.devices, (*enc).device); err != nil {
		return err
	}
	for _, id := range sortedKeys(c.live) {
		a, r := s.allocs[id], c.live[id]
		if a != nil && r.at == a.ModifyIndex && !bytes.Equal(r.b, framed(func(e *enc) { e.alloc(a) })) {
			return fmt.Errorf("allocation %s changed without a new ModifyIndex (%d): the kept snapshot record is stale", id, a.ModifyIndex)
		}
	}
	return nil
}

// checkKept compares the records kept of what objs holds with fresh
// encodings: one kept for an object that left, or that differs, is stale.
func checkKept[T any](what string, kept map[string][]byte, objs map[string]T, encode func(*enc, T)) error {
	for _, id := range sortedKeys(kept) {
		o, ok := objs[id]
		if !ok {
			return fmt.Errorf("%s %s: a snapshot record is kept for a %s that left", what, id, what)
		}
		if !bytes.Equal(kept[id], framed(func(e *enc) { encode(e, o) })) {
			return fmt.Errorf("%s %s: the kept snapshot record is stale", what, id)
		}
	}
	return nil
}
