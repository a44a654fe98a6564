package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
)

// The head of a snapshot (hosts, devices, live allocations) is captured
// under the FSM's lock, by Raft's Snapshot and by the state hash: an
// apply stall of that length. With 100,000 devices most of it would be
// encoding records that did not change since the last time and sorting
// IDs that did not change either. So each host, device and live
// allocation keeps its framed record (length, then bytes) until it
// changes, the state keeps the sorted IDs of the hosts and of the devices
// until one joins or leaves, and a captured head is a list of references
// to those records, copied by nobody: a kept record is never written to,
// only replaced.
//
// A device's record is dropped where the device changes (unindex and
// reindex bracket every change), a host's where the host changes
// (registerHost, setHostStatus), the orders where the maps gain or lose a
// key. A live allocation's record is kept with the ModifyIndex it was
// encoded at: every change of an allocation moves its ModifyIndex.
// CheckInvariants compares every kept record and order with a fresh one.

// headCache holds the kept sorted IDs; nil is stale. Readers that hold
// the FSM's read lock together may capture heads together: mu is held
// while the kept records and orders are read or filled. Commands change
// them under the FSM's write lock.
type headCache struct {
	mu             sync.Mutex
	hosts, devices []string
}

// hostOrder is the hosts' IDs, sorted; the caller must not change it.
func (s *State) hostOrder() []string {
	if s.head.hosts == nil {
		s.head.hosts = sortedKeys(s.hosts)
	}
	return s.head.hosts
}

// deviceOrder is the devices' IDs, sorted; the caller must not change it.
func (s *State) deviceOrder() []string {
	if s.head.devices == nil {
		s.head.devices = sortedKeys(s.devices)
	}
	return s.head.devices
}

// framed is the record f encodes, preceded by its length.
func framed(f func(*enc)) []byte {
	var e enc
	f(&e)
	out := binary.AppendUvarint(make([]byte, 0, len(e.b)+binary.MaxVarintLen32), uint64(len(e.b)))
	return append(out, e.b...)
}

// hostRecord is h's framed record.
func hostRecord(h *Host) []byte {
	if h.enc == nil {
		h.enc = framed(func(e *enc) { e.host(h) })
	}
	return h.enc
}

// deviceRecord is d's framed record.
func deviceRecord(d *Device) []byte {
	if d.enc == nil {
		d.enc = framed(func(e *enc) { e.device(d) })
	}
	return d.enc
}

// liveRecord is a's framed record.
func liveRecord(a *Allocation) []byte {
	if a.enc == nil || a.encAt != a.ModifyIndex {
		a.enc, a.encAt = framed(func(e *enc) { e.alloc(a) }), a.ModifyIndex
	}
	return a.enc
}

// checkHeadCache compares the kept records and orders with fresh ones.
func (s *State) checkHeadCache() error {
	s.head.mu.Lock()
	defer s.head.mu.Unlock()
	if s.head.hosts != nil && !slices.Equal(s.head.hosts, sortedKeys(s.hosts)) {
		return fmt.Errorf("the kept order of the hosts is stale")
	}
	if s.head.devices != nil && !slices.Equal(s.head.devices, sortedKeys(s.devices)) {
		return fmt.Errorf("the kept order of the devices is stale")
	}
	for _, id := range sortedKeys(s.hosts) {
		if h := s.hosts[id]; h.enc != nil && !bytes.Equal(h.enc, framed(func(e *enc) { e.host(h) })) {
			return fmt.Errorf("host %s: the kept snapshot record is stale", id)
		}
	}
	for _, id := range sortedKeys(s.devices) {
		if d := s.devices[id]; d.enc != nil && !bytes.Equal(d.enc, framed(func(e *enc) { e.device(d) })) {
			return fmt.Errorf("device %s: the kept snapshot record is stale", id)
		}
	}
	for _, id := range sortedKeys(s.allocs) {
		a := s.allocs[id]
		if a.enc != nil && a.encAt == a.ModifyIndex && !bytes.Equal(a.enc, framed(func(e *enc) { e.alloc(a) })) {
			return fmt.Errorf("allocation %s changed without a new ModifyIndex (%d): the kept snapshot record is stale", id, a.ModifyIndex)
		}
	}
	return nil
}
