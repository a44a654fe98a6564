package fsm

import (
	"bytes"
	"encoding/json"
	"io"
	"sort"
)

// SnapshotVersion is the version of the snapshot encoding this code writes.
const SnapshotVersion = 1

// snapshotV1 is the canonical encoding of a State: slices in a fixed order,
// maps with sorted keys (encoding/json sorts them), no derived state.
type snapshotV1 struct {
	Version      int                         `json:"version"`
	Now          int64                       `json:"now"`
	Seq          uint64                      `json:"seq"`
	Last         uint64                      `json:"last"`
	Hosts        []Host                      `json:"hosts"`
	Devices      []*Device                   `json:"devices"`
	Live         []*Allocation               `json:"live"`
	History      []*Allocation               `json:"history"`
	Requests     []cacheEntry                `json:"requests"`
	TypePolicies map[DeviceType]PolicyConfig `json:"type_policies"`
	PoolPolicies map[string]PolicyConfig     `json:"pool_policies"`
	Cursors      map[DeviceType]string       `json:"cursors"`
	Retention    Retention                   `json:"retention"`
	Shapes       []Shape                     `json:"shapes"`
	// RemovedServers is absent when empty, so snapshots of states that
	// never removed a server read as before.
	RemovedServers map[string]int64 `json:"removed_servers,omitempty"`
	// ACL is absent until ACLs are used.
	ACL *aclSnapshot `json:"acl,omitempty"`
}

// aclSnapshot is the ACL state in a snapshot.
type aclSnapshot struct {
	BootstrapIndex uint64      `json:"bootstrap_index"`
	Policies       []ACLPolicy `json:"policies"`
	Tokens         []ACLToken  `json:"tokens"`
}

// Snapshot writes the whole state. Two states that applied the same
// commands write the same bytes.
func (s *State) Snapshot(w io.Writer) error {
	snap := snapshotV1{
		Version: SnapshotVersion, Now: s.now, Seq: s.seq, Last: s.last,
		Hosts:          s.Hosts(),
		Devices:        make([]*Device, 0, len(s.devices)),
		Live:           make([]*Allocation, 0, len(s.allocs)),
		History:        make([]*Allocation, 0, s.history.len()),
		Requests:       s.cache.entries(),
		TypePolicies:   s.typePolicies,
		PoolPolicies:   s.poolPolicies,
		Cursors:        s.cursors,
		Retention:      s.retention,
		Shapes:         s.shapes.list,
		RemovedServers: s.removedServers,
	}
	if used, _ := s.ACLBootstrapped(); used || len(s.acl.policies) > 0 || len(s.acl.tokens) > 1 {
		snap.ACL = &aclSnapshot{BootstrapIndex: s.acl.bootstrapIndex, Policies: s.ACLPolicies(), Tokens: s.ACLTokens()}
	}
	if snap.Requests == nil {
		// An emptied cache and a restored empty one write the same.
		snap.Requests = []cacheEntry{}
	}
	for _, id := range sortedKeys(s.devices) {
		snap.Devices = append(snap.Devices, s.devices[id])
	}
	for _, id := range sortedKeys(s.allocs) {
		snap.Live = append(snap.Live, s.allocs[id])
	}
	s.history.each(func(a *Allocation) bool {
		snap.History = append(snap.History, a)
		return true
	})
	enc := json.NewEncoder(w)
	return enc.Encode(&snap)
}

// SnapshotBytes returns Snapshot's output.
func (s *State) SnapshotBytes() []byte {
	var b bytes.Buffer
	if err := s.Snapshot(&b); err != nil {
		// Encoding plain data to a buffer cannot fail.
		return nil
	}
	return b.Bytes()
}

// Restore reads a snapshot written by Snapshot and rebuilds the state,
// derived indexes included. A snapshot that does not hold together is
// refused with ErrSnapshot.
func Restore(r io.Reader) (*State, error) {
	var snap snapshotV1
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&snap); err != nil {
		return nil, errf(ErrSnapshot, "decode: %v", err)
	}
	if snap.Version != SnapshotVersion {
		return nil, errf(ErrSnapshot, "version %d, this build reads %d", snap.Version, SnapshotVersion)
	}
	s := New()
	s.now, s.seq, s.last = snap.Now, snap.Seq, snap.Last
	s.retention = snap.Retention
	s.typePolicies = nonNil(snap.TypePolicies)
	s.poolPolicies = nonNil(snap.PoolPolicies)
	for _, t := range sortedKeys(typeKeys(s.typePolicies)) {
		if c := s.typePolicies[DeviceType(t)]; !DeviceType(t).Valid() || !c.Policy.Valid() {
			return nil, errf(ErrSnapshot, "policy %q for type %q unknown to this build", c.Policy, t)
		}
	}
	for _, p := range sortedKeys(s.poolPolicies) {
		if c := s.poolPolicies[p]; !c.Policy.Valid() {
			return nil, errf(ErrSnapshot, "policy %q for pool %q unknown to this build", c.Policy, p)
		}
	}
	s.cursors = nonNil(snap.Cursors)
	s.removedServers = nonNil(snap.RemovedServers)
	if a := snap.ACL; a != nil {
		s.acl.bootstrapIndex = a.BootstrapIndex
		for i := range a.Policies {
			p := a.Policies[i]
			if !validACLName(p.Name) || s.acl.policies[p.Name] != nil || validateRules(&p.Rules) != nil {
				return nil, errf(ErrSnapshot, "ACL policy %q empty, repeated or invalid", p.Name)
			}
			s.acl.policies[p.Name] = &p
		}
		for i := range a.Tokens {
			t := a.Tokens[i]
			if t.AccessorID != AnonymousAccessorID && s.acl.tokens[t.AccessorID] != nil {
				return nil, errf(ErrSnapshot, "ACL token %q repeated", t.AccessorID)
			}
			if err := s.validateToken(&t); err != nil {
				return nil, errf(ErrSnapshot, "ACL token %q: %v", t.AccessorID, err)
			}
			s.acl.tokens[t.AccessorID] = &t
			if t.SecretHash != "" {
				s.acl.bySecret[t.SecretHash] = t.AccessorID
			}
		}
	}
	for _, id := range sortedKeys(s.removedServers) {
		if id == "" || len(id) > MaxServerIDLength {
			return nil, errf(ErrSnapshot, "removed server id %q empty or too long", id)
		}
	}
	for _, sh := range snap.Shapes {
		s.shapes.list = append(s.shapes.list, sh)
	}
	for i := range snap.Hosts {
		h := snap.Hosts[i]
		if h.ID == "" || s.hosts[h.ID] != nil {
			return nil, errf(ErrSnapshot, "host %q empty or repeated", h.ID)
		}
		s.hosts[h.ID] = &h
	}
	for _, d := range snap.Devices {
		if d == nil {
			return nil, errf(ErrSnapshot, "device empty")
		}
		h := s.hosts[d.Host]
		if d.ID == "" || s.devices[d.ID] != nil || h == nil || !d.Type.Valid() {
			return nil, errf(ErrSnapshot, "device empty, repeated, of unknown type or on an unknown host")
		}
		if i := sort.SearchStrings(h.Devices, d.ID); i >= len(h.Devices) || h.Devices[i] != d.ID {
			return nil, errf(ErrSnapshot, "device %q not listed by host %q", d.ID, d.Host)
		}
		s.devices[d.ID] = d
		s.addClassDevice(d)
	}
	for _, h := range s.hosts {
		for _, id := range h.Devices {
			if d := s.devices[id]; d == nil || d.Host != h.ID {
				return nil, errf(ErrSnapshot, "host %q lists unknown device %q", h.ID, id)
			}
		}
	}
	for _, a := range snap.Live {
		// A live request is placed again: it must be one Allocate accepts.
		if a == nil || !a.Status.Live() || s.allocs[a.ID] != nil || validateRequest(&a.Request) != nil {
			return nil, errf(ErrSnapshot, "bad live allocation")
		}
		for _, as := range a.Devices {
			d := s.devices[as.DeviceID]
			if d == nil || a.Status != Active {
				return nil, errf(ErrSnapshot, "allocation %s holds unknown device %q", a.ID, as.DeviceID)
			}
		}
		if a.Namespace == "" {
			a.Namespace = DefaultNamespace // written before namespaces
		}
		s.allocs[a.ID] = a
		switch a.Status {
		case Pending:
			s.queue.ReplaceOrInsert(queueKeyOf(a))
			if a.Deadline != 0 {
				s.timers.ReplaceOrInsert(timerKey{at: a.Deadline, kind: deadlineTimer, id: a.ID})
			}
		case Active:
			if a.LeaseExpiresAt != 0 {
				s.timers.ReplaceOrInsert(timerKey{at: a.LeaseExpiresAt, kind: leaseTimer, id: a.ID})
			}
		}
	}
	for _, a := range snap.History {
		if a == nil || a.Status.Live() || s.lookup(a.ID) != nil {
			return nil, errf(ErrSnapshot, "bad history entry")
		}
		if a.Namespace == "" {
			a.Namespace = DefaultNamespace
		}
		s.history.add(a)
	}
	for _, e := range snap.Requests {
		s.cache.put(e)
	}
	for _, id := range sortedKeys(s.devices) {
		s.reindex(s.devices[id])
	}
	s.rebuildStatsAgg()
	if err := s.CheckInvariants(); err != nil {
		return nil, errf(ErrSnapshot, "%v", err)
	}
	return s, nil
}

// typeKeys lists a map's device types as strings, for sortedKeys.
func typeKeys[V any](m map[DeviceType]V) map[string]bool {
	out := make(map[string]bool, len(m))
	for t := range m {
		out[string(t)] = true
	}
	return out
}

func nonNil[K comparable, V any](m map[K]V) map[K]V {
	if m == nil {
		return map[K]V{}
	}
	return m
}
