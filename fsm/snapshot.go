package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"sort"
)

// SnapshotVersion is the snapshot format this code writes. A snapshot's
// first byte is its format: 2 starts the binary format below; a snapshot
// that starts otherwise is read as format 1, one JSON document (written
// before format 2; "{" or white space comes first).
const SnapshotVersion = 2

// Format 2 (DESIGN.md, "History and snapshot") is the format byte, then
// records, each a uvarint length and that many bytes in the record
// encoding of snapcodec.go:
//
//	head record:  now, seq, last, the configuration as JSON (snapshotConfig)
//	hosts:        count, then one record per host, by ID
//	devices:      count, then one record per device, by ID
//	live:         count, then one record per live allocation, by ID
//	requests:     count, then one record per remembered request, oldest first
//	history:      count, then one record per ended allocation, oldest first
//
// and nothing after. Counts are uvarints. It is written and read as a
// stream: neither side holds more than one record besides the state.

// maxSnapshotRecord bounds one record (a host lists at most
// MaxDevicesPerHost IDs; nothing else comes near).
const maxSnapshotRecord = 64 << 20

// snapshotConfig is the small part of the state that changes rarely:
// policies, cursors, retention, shapes, removed servers, ACLs. Its JSON is
// canonical (encoding/json sorts map keys).
type snapshotConfig struct {
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

// snapshotV1 is format 1: the whole state as one JSON document, slices
// in a fixed order, maps with sorted keys. Restore still reads it.
type snapshotV1 struct {
	Version  int           `json:"version"`
	Now      int64         `json:"now"`
	Seq      uint64        `json:"seq"`
	Last     uint64        `json:"last"`
	Hosts    []Host        `json:"hosts"`
	Devices  []*Device     `json:"devices"`
	Live     []*Allocation `json:"live"`
	History  []*Allocation `json:"history"`
	Requests []cacheEntry  `json:"requests"`
	snapshotConfig
}

// aclSnapshot is the ACL state in a snapshot.
type aclSnapshot struct {
	BootstrapIndex uint64      `json:"bootstrap_index"`
	Policies       []ACLPolicy `json:"policies"`
	Tokens         []ACLToken  `json:"tokens"`
}

func (s *State) snapshotConfig() snapshotConfig {
	c := snapshotConfig{
		TypePolicies:   s.typePolicies,
		PoolPolicies:   s.poolPolicies,
		Cursors:        s.cursors,
		Retention:      s.retention,
		Shapes:         s.shapes.list,
		RemovedServers: s.removedServers,
	}
	if used, _ := s.ACLBootstrapped(); used || len(s.acl.policies) > 0 || len(s.acl.tokens) > 1 {
		c.ACL = &aclSnapshot{BootstrapIndex: s.acl.bootstrapIndex, Policies: s.ACLPolicies(), Tokens: s.ACLTokens()}
	}
	return c
}

// SnapshotView is a snapshot captured from a state at one moment: the
// parts that change in place already encoded, the remembered requests
// as a copy and the history (whose records never change) as a view of its
// list. It is written
// later, without the state's lock: commands applied meanwhile do not
// change what it writes.
type SnapshotView struct {
	head     [][]byte
	requests []cacheEntry
	history  []histEntry
}

// CaptureSnapshot captures the state for a later WriteTo. Its cost is
// listing the kept records of the hosts, devices and live allocations
// (encoding those that changed, snapcache.go) and copying the list of
// requests; the history's list is shared, not copied (history.view),
// and encoded by WriteTo.
func (s *State) CaptureSnapshot() (*SnapshotView, error) {
	head, err := s.encodeHead()
	if err != nil {
		return nil, err
	}
	return &SnapshotView{head: head, requests: s.cache.entries(), history: s.history.view()}, nil
}

// WriteTo writes the snapshot.
func (v *SnapshotView) WriteTo(w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	bw := bufio.NewWriterSize(cw, 1<<20)
	for _, b := range v.head {
		bw.Write(b)
	}
	var rec enc
	var n [binary.MaxVarintLen64]byte
	record := func() {
		bw.Write(binary.AppendUvarint(n[:0], uint64(len(rec.b))))
		bw.Write(rec.b)
	}
	bw.Write(binary.AppendUvarint(n[:0], uint64(len(v.requests))))
	for i := range v.requests {
		rec.b = rec.b[:0]
		rec.cacheEntry(&v.requests[i])
		record()
	}
	bw.Write(binary.AppendUvarint(n[:0], uint64(len(v.history))))
	for _, e := range v.history {
		rec.b = rec.b[:0]
		rec.alloc(e.a)
		record()
	}
	err := bw.Flush() // a failed write sticks: Flush reports it
	return cw.n, err
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Snapshot writes the whole state. Two states that applied the same
// commands write the same bytes.
func (s *State) Snapshot(w io.Writer) error {
	v, err := s.CaptureSnapshot()
	if err != nil {
		return err
	}
	_, err = v.WriteTo(w)
	return err
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

// WriteDigest writes what identifies the state, for hashing: the
// snapshot, except that the history is written as its count and the
// digest of its records, kept as records enter and leave it. Two states
// that applied the same commands write the same bytes, and its cost does
// not grow with the history.
func (s *State) WriteDigest(w io.Writer) error {
	head, err := s.encodeHead()
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	for _, b := range head {
		bw.Write(b)
	}
	if err := bw.Flush(); err != nil { // a failed write sticks: Flush reports it
		return err
	}
	var rec enc
	entries := s.cache.entries()
	rec.uvarint(uint64(len(entries)))
	for i := range entries {
		rec.cacheEntry(&entries[i]) // records delimit themselves
	}
	rec.uvarint(uint64(s.history.len()))
	rec.b = binary.BigEndian.AppendUint64(rec.b, s.history.digest)
	_, err = w.Write(rec.b)
	return err
}

// Restore reads a snapshot written by Snapshot (format 2, or format 1 of
// older builds) and rebuilds the state, derived indexes included. It
// reads r as a stream. A snapshot that does not hold together is refused
// with ErrSnapshot.
func Restore(r io.Reader) (*State, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	first, err := br.Peek(1)
	if err == nil && first[0] == SnapshotVersion {
		return restoreV2(br)
	}
	return restoreV1(br)
}

func restoreV1(r io.Reader) (*State, error) {
	var snap snapshotV1
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&snap); err != nil {
		return nil, errf(ErrSnapshot, "decode: %v", err)
	}
	if snap.Version != 1 {
		return nil, errf(ErrSnapshot, "version %d, this build reads 1 and %d", snap.Version, SnapshotVersion)
	}
	s := New()
	s.now, s.seq, s.last = snap.Now, snap.Seq, snap.Last
	if err := s.restoreConfig(&snap.snapshotConfig); err != nil {
		return nil, err
	}
	for i := range snap.Hosts {
		if err := s.restoreHost(&snap.Hosts[i]); err != nil {
			return nil, err
		}
	}
	for _, d := range snap.Devices {
		if err := s.restoreDevice(d); err != nil {
			return nil, err
		}
	}
	if err := s.checkHostDevices(); err != nil {
		return nil, err
	}
	for _, a := range snap.Live {
		if err := s.restoreLive(a); err != nil {
			return nil, err
		}
	}
	for _, a := range snap.History {
		if err := s.restoreHistory(a); err != nil {
			return nil, err
		}
	}
	for _, e := range snap.Requests {
		s.cache.put(e)
	}
	return s.restoreFinish()
}

// snapReader reads format 2's counts and records from a stream.
type snapReader struct {
	r   *bufio.Reader
	buf []byte
	// syms is shared by every record, so that the strings they repeat
	// are held once.
	syms map[string]string
}

// uvarint reads a count or a record's length, in its one encoding.
func (sr *snapReader) uvarint() (uint64, error) {
	var x uint64
	for i := 0; i < binary.MaxVarintLen64; i++ {
		c, err := sr.r.ReadByte()
		if err != nil {
			return 0, errf(ErrSnapshot, "truncated")
		}
		if i == binary.MaxVarintLen64-1 && c > 1 || i > 0 && c == 0 {
			break
		}
		x |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return x, nil
		}
	}
	return 0, errf(ErrSnapshot, "bad varint")
}

// record reads the next record, decodes it with f and checks that f
// took all of it.
func (sr *snapReader) record(what string, f func(*dec)) error {
	n, err := sr.uvarint()
	if err != nil {
		return err
	}
	if n > maxSnapshotRecord {
		return errf(ErrSnapshot, "%s record of %d bytes", what, n)
	}
	if n <= uint64(cap(sr.buf)) {
		sr.buf = sr.buf[:n]
		_, err = io.ReadFull(sr.r, sr.buf)
	} else {
		// Grown as the bytes arrive: a length beyond the stream's end
		// costs no more than the stream.
		var b bytes.Buffer
		_, err = io.CopyN(&b, sr.r, int64(n))
		sr.buf = b.Bytes()
	}
	if err != nil {
		return errf(ErrSnapshot, "truncated %s record", what)
	}
	d := dec{b: sr.buf, syms: sr.syms}
	f(&d)
	if d.err != nil || len(d.b) != 0 {
		return errf(ErrSnapshot, "malformed %s record", what)
	}
	return nil
}

// readSection reads a count and then that many records, each decoded
// with decode and, once it decoded whole, handed to apply.
func readSection[T any](sr *snapReader, what string, decode func(*dec) T, apply func(T) error) error {
	n, err := sr.uvarint()
	if err != nil {
		return err
	}
	for ; n > 0; n-- {
		var v T
		if err := sr.record(what, func(d *dec) { v = decode(d) }); err != nil {
			return err
		}
		if err := apply(v); err != nil {
			return err
		}
	}
	return nil
}

func restoreV2(r *bufio.Reader) (*State, error) {
	sr := &snapReader{r: r, buf: make([]byte, 0, 64<<10), syms: map[string]string{}}
	if _, err := r.ReadByte(); err != nil {
		return nil, errf(ErrSnapshot, "truncated")
	}
	s := New()
	var cfg []byte
	err := sr.record("head", func(d *dec) {
		s.now, s.seq, s.last = d.varint(), d.uvarint(), d.uvarint()
		cfg, d.b = d.b, nil
	})
	if err != nil {
		return nil, err
	}
	var c snapshotConfig
	jd := json.NewDecoder(bytes.NewReader(cfg))
	jd.DisallowUnknownFields()
	if err := jd.Decode(&c); err != nil || jd.More() {
		return nil, errf(ErrSnapshot, "configuration: %v", err)
	}
	if err := s.restoreConfig(&c); err != nil {
		return nil, err
	}
	if err := readSection(sr, "host", (*dec).host, s.restoreHost); err != nil {
		return nil, err
	}
	if err := readSection(sr, "device", (*dec).device, s.restoreDevice); err != nil {
		return nil, err
	}
	if err := s.checkHostDevices(); err != nil {
		return nil, err
	}
	if err := readSection(sr, "live allocation", (*dec).alloc, s.restoreLive); err != nil {
		return nil, err
	}
	putRequest := func(e cacheEntry) error { s.cache.put(e); return nil }
	if err := readSection(sr, "request", (*dec).cacheEntry, putRequest); err != nil {
		return nil, err
	}
	if err := readSection(sr, "history", (*dec).alloc, s.restoreHistory); err != nil {
		return nil, err
	}
	if _, err := r.ReadByte(); err != io.EOF {
		return nil, errf(ErrSnapshot, "bytes after the history")
	}
	return s.restoreFinish()
}

// restoreConfig takes a snapshot's configuration into a new state.
func (s *State) restoreConfig(c *snapshotConfig) error {
	s.retention = c.Retention
	s.typePolicies = nonNil(c.TypePolicies)
	s.poolPolicies = nonNil(c.PoolPolicies)
	for _, t := range sortedKeys(typeKeys(s.typePolicies)) {
		if c := s.typePolicies[DeviceType(t)]; !DeviceType(t).Valid() || !c.Policy.Valid() {
			return errf(ErrSnapshot, "policy %q for type %q unknown to this build", c.Policy, t)
		}
	}
	for _, p := range sortedKeys(s.poolPolicies) {
		if c := s.poolPolicies[p]; !c.Policy.Valid() {
			return errf(ErrSnapshot, "policy %q for pool %q unknown to this build", c.Policy, p)
		}
	}
	s.cursors = nonNil(c.Cursors)
	s.removedServers = nonNil(c.RemovedServers)
	if a := c.ACL; a != nil {
		s.acl.bootstrapIndex = a.BootstrapIndex
		for i := range a.Policies {
			p := a.Policies[i]
			if !validACLName(p.Name) || s.acl.policies[p.Name] != nil || validateRules(&p.Rules) != nil {
				return errf(ErrSnapshot, "ACL policy %q empty, repeated or invalid", p.Name)
			}
			s.acl.policies[p.Name] = &p
		}
		for i := range a.Tokens {
			t := a.Tokens[i]
			if t.AccessorID != AnonymousAccessorID && s.acl.tokens[t.AccessorID] != nil {
				return errf(ErrSnapshot, "ACL token %q repeated", t.AccessorID)
			}
			if err := s.validateToken(&t); err != nil {
				return errf(ErrSnapshot, "ACL token %q: %v", t.AccessorID, err)
			}
			s.acl.tokens[t.AccessorID] = &t
			if t.SecretHash != "" {
				s.acl.bySecret[t.SecretHash] = t.AccessorID
			}
		}
	}
	for _, id := range sortedKeys(s.removedServers) {
		if id == "" || len(id) > MaxServerIDLength {
			return errf(ErrSnapshot, "removed server id %q empty or too long", id)
		}
	}
	s.shapes.list = append(s.shapes.list, c.Shapes...)
	return nil
}

func (s *State) restoreHost(h *Host) error {
	if h.ID == "" || s.hosts[h.ID] != nil {
		return errf(ErrSnapshot, "host %q empty or repeated", h.ID)
	}
	s.hosts[h.ID] = h
	return nil
}

func (s *State) restoreDevice(d *Device) error {
	if d == nil {
		return errf(ErrSnapshot, "device empty")
	}
	h := s.hosts[d.Host]
	if d.ID == "" || s.devices[d.ID] != nil || h == nil || !d.Type.Valid() {
		return errf(ErrSnapshot, "device empty, repeated, of unknown type or on an unknown host")
	}
	if i := sort.SearchStrings(h.Devices, d.ID); i >= len(h.Devices) || h.Devices[i] != d.ID {
		return errf(ErrSnapshot, "device %q not listed by host %q", d.ID, d.Host)
	}
	s.devices[d.ID] = d
	s.addClassDevice(d)
	return nil
}

// checkHostDevices checks, once every device is in, that each host lists
// only its own devices.
func (s *State) checkHostDevices() error {
	for _, h := range s.hosts {
		for _, id := range h.Devices {
			if d := s.devices[id]; d == nil || d.Host != h.ID {
				return errf(ErrSnapshot, "host %q lists unknown device %q", h.ID, id)
			}
		}
	}
	return nil
}

func (s *State) restoreLive(a *Allocation) error {
	// A live request is placed again: it must be one Allocate accepts.
	if a == nil || !a.Status.Live() || s.allocs[a.ID] != nil || validateRequest(&a.Request) != nil {
		return errf(ErrSnapshot, "bad live allocation")
	}
	for _, as := range a.Devices {
		d := s.devices[as.DeviceID]
		if d == nil || a.Status != Active {
			return errf(ErrSnapshot, "allocation %s holds unknown device %q", a.ID, as.DeviceID)
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
	return nil
}

func (s *State) restoreHistory(a *Allocation) error {
	if a == nil || a.Status.Live() || s.lookup(a.ID) != nil {
		return errf(ErrSnapshot, "bad history entry")
	}
	if a.Namespace == "" {
		a.Namespace = DefaultNamespace
	}
	s.history.add(a)
	return nil
}

// restoreFinish rebuilds the derived state once everything is in, and
// checks that it holds together.
func (s *State) restoreFinish() (*State, error) {
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
