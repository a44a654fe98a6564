package fsm

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"io"
	"runtime"
	"slices"
	"sort"
	"sync"
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
// stream: the writer holds one record besides the state, the reader the
// batches it has in flight (readSection; a few hundred KB).

// historyStep is the history entries a restore makes room for first.
const historyStep = 1 << 14

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
	// Drains are the drained hosts' drains, absent when none is.
	Drains map[string]HostDrain `json:"drains,omitempty"`
	// Quotas are the namespaces' quotas by namespace, absent when none.
	Quotas []Quota `json:"quotas,omitempty"`
	// FairShare is absent while fair share is off.
	FairShare *fairSnapshot `json:"fair_share,omitempty"`
	// PreemptWaiting is absent while off (SetQueueConfig).
	PreemptWaiting bool `json:"preempt_waiting,omitempty"`
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
		Drains:         s.drains(),
		Quotas:         s.Quotas(),
		FairShare:      s.fairSnapshot(),
		PreemptWaiting: s.preemptWaiting,
	}
	if used, _ := s.ACLBootstrapped(); used || len(s.acl.policies) > 0 || len(s.acl.tokens) > 1 {
		c.ACL = &aclSnapshot{BootstrapIndex: s.acl.bootstrapIndex, Policies: s.ACLPolicies(), Tokens: s.ACLTokens()}
	}
	return c
}

// SnapshotView is a snapshot captured from a state at one moment: the
// parts that change in place already encoded, the remembered requests
// as a copy and the history (whose records never change) as a view of its
// entries and the chunks that hold its records. It is written
// later, without the state's lock: commands applied meanwhile do not
// change what it writes.
type SnapshotView struct {
	head     [][]byte
	requests []cacheEntry
	history  histView
}

// CaptureSnapshot captures the state for a later WriteTo. Its cost is
// listing the kept records of the hosts, devices and live allocations
// (encoding those that changed, snapcache.go) and copying the list of
// requests; the history's entries and records are shared, not copied
// (history.view), and written by WriteTo as they are.
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
	record := func(b []byte) {
		bw.Write(binary.AppendUvarint(n[:0], uint64(len(b))))
		bw.Write(b)
	}
	bw.Write(binary.AppendUvarint(n[:0], uint64(len(v.requests))))
	for i := range v.requests {
		rec.b = rec.b[:0]
		rec.cacheEntry(&v.requests[i])
		record(rec.b)
	}
	bw.Write(binary.AppendUvarint(n[:0], uint64(len(v.history.list))))
	for _, e := range v.history.list {
		record(v.history.record(e))
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
// snapshot, except that the request cache and the history are each
// written as their count and the digest of their entries, kept as entries
// enter and leave them. Two states that applied the same commands write
// the same bytes, and its cost grows with neither.
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
	rec.uvarint(uint64(s.cache.n))
	rec.b = binary.BigEndian.AppendUint64(rec.b, s.cache.digest)
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
	if err := s.restoreDrains(snap.Drains); err != nil {
		return nil, err
	}
	if err := s.restoreQuotas(snap.Quotas); err != nil {
		return nil, err
	}
	if err := s.restoreFairShare(snap.FairShare); err != nil {
		return nil, err
	}
	s.preemptWaiting = snap.PreemptWaiting
	g := newStatsGather()
	for _, a := range snap.Live {
		if err := s.restoreLive(a); err != nil {
			return nil, err
		}
		s.gatherLive(g, a)
	}
	filer := historyFiler{s: s}
	err := func() error {
		for _, a := range snap.History {
			if a == nil {
				return errf(ErrSnapshot, "bad history entry")
			}
			r := histRecord{a: *a}
			if err := s.checkHistory(&r); err != nil {
				return err
			}
			r.idHash = s.history.idx.hash(r.a.ID)
			g.add(&r.a, s.statsPool(&r.a))
			filer.file(&r)
		}
		return nil
	}()
	indexed := make(chan error, 1)
	indexed <- filer.finish(err)
	for _, e := range snap.Requests {
		s.cache.put(e)
	}
	return s.restoreFinish([]*statsGather{g}, sortedKeys(s.devices), indexed)
}

// snapReader reads format 2's counts and records from a stream.
type snapReader struct {
	r *bufio.Reader
	// in holds, per decoder, what the records it decoded repeat, so that
	// it is held once (or once per decoder).
	in []*interner
	// devs are the state's devices once they are all read (dec.devs).
	devs map[string]restoredDev
}

func newSnapReader(r *bufio.Reader) *snapReader {
	sr := &snapReader{r: r}
	sr.newInterners()
	return sr
}

// newInterners gives each decoder an empty interner.
func (sr *snapReader) newInterners() {
	sr.in = make([]*interner, sectionDecoders())
	for i := range sr.in {
		sr.in[i] = newInterner()
	}
}

// sectionDecoders is how many goroutines decode a section's records side
// by side: one per processor, up to 4.
func sectionDecoders() int { return min(runtime.GOMAXPROCS(0), 4) }

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

// frame reads the next record and appends its bytes to buf.
func (sr *snapReader) frame(what string, buf []byte) ([]byte, error) {
	n, err := sr.uvarint()
	if err != nil {
		return buf, err
	}
	if n > maxSnapshotRecord {
		return buf, errf(ErrSnapshot, "%s record of %d bytes", what, n)
	}
	if k := len(buf); n <= uint64(cap(buf)-k) {
		buf = buf[:k+int(n)]
		_, err = io.ReadFull(sr.r, buf[k:])
	} else {
		// Grown as the bytes arrive: a length beyond the stream's end
		// costs no more than the stream.
		b := bytes.NewBuffer(buf)
		_, err = io.CopyN(b, sr.r, int64(n))
		buf = b.Bytes()
	}
	if err != nil {
		return buf, errf(ErrSnapshot, "truncated %s record", what)
	}
	return buf, nil
}

// decodeRecord decodes record b with f, in d, and checks that f took
// all of it. A decoder reuses its d: one that f is handed escapes to the
// heap, and a record each would make that much garbage.
func (sr *snapReader) decodeRecord(what string, d *dec, b []byte, in *interner, f func(*dec)) error {
	*d = dec{b: b, in: in, devs: sr.devs}
	f(d)
	if d.err != nil || len(d.b) != 0 {
		return errf(ErrSnapshot, "malformed %s record", what)
	}
	return nil
}

// A section's records are read in batches: one goroutine frames them
// (reads each one's length and bytes), sectionDecoders goroutines decode
// batches side by side, and readSection applies them in the stream's
// order.
const (
	// sectionBatch is the most records in a batch, and
	// sectionBatchBytes the bytes after which a batch takes no more.
	sectionBatch      = 256
	sectionBatchBytes = 32 << 10
)

// batch is a run of consecutive records of a section.
type batch[T any] struct {
	raw  []byte // the records' bytes, one after the other
	ends []int  // where each record ends in raw
	// ferr is what stopped the framing after these records, if anything.
	ferr error
	// recs are the records decoded, err the first error among the
	// batch's records: one that did not decode, else ferr. done is
	// closed once they are set.
	recs []T
	err  error
	done chan struct{}
}

// readSection reads a count, tells it to count (unless nil), then
// reads that many records, each decoded with decode and, once it decoded
// whole, handed to apply, in order. Framing, decoding and applying run
// on goroutines of their own, to use more than one core; what
// readSection returns is what doing it all in turn, a record at a time,
// would: the first error in the stream's order. Once apply refuses a
// record, the framing stops at the end of its batch; every goroutine has
// ended when readSection returns.
func readSection[T any](sr *snapReader, what string, count func(uint64), decode func(d *dec, decoder int) T, apply func(T) error) error {
	n, err := sr.uvarint()
	if err != nil {
		return err
	}
	if count != nil {
		count(n)
	}
	if n == 0 {
		return nil
	}
	inFlight := 2 * len(sr.in)
	order := make(chan *batch[T], inFlight) // to apply, in the stream's order
	work := make(chan *batch[T], inFlight)  // to decode
	free := make(chan *batch[T], inFlight)  // applied, to use again
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { // the framer
		defer close(work)
		defer close(order)
		for n > 0 {
			select {
			case <-stop:
				return
			default:
			}
			var b *batch[T]
			select {
			case b = <-free:
				*b = batch[T]{raw: b.raw[:0], ends: b.ends[:0], recs: b.recs[:0]}
			default:
				b = &batch[T]{raw: make([]byte, 0, sectionBatchBytes+1<<10)}
			}
			b.done = make(chan struct{})
			for ; n > 0 && len(b.ends) < sectionBatch && len(b.raw) < sectionBatchBytes; n-- {
				if b.raw, b.ferr = sr.frame(what, b.raw); b.ferr != nil {
					n = 0
					break
				}
				b.ends = append(b.ends, len(b.raw))
			}
			select {
			case order <- b:
			case <-stop:
				return
			}
			work <- b // a short wait at most: decoders never wait but for work
		}
	})
	for w, in := range sr.in {
		wg.Go(func() { // a decoder
			var d dec
			for b := range work {
				start := 0
				for _, end := range b.ends {
					var v T
					if b.err = sr.decodeRecord(what, &d, b.raw[start:end], in, func(d *dec) { v = decode(d, w) }); b.err != nil {
						break
					}
					b.recs = append(b.recs, v)
					start = end
				}
				if b.err == nil {
					b.err = b.ferr
				}
				close(b.done)
			}
		})
	}
	defer func() {
		close(stop)
		for range order { // unblocks the framer
		}
		wg.Wait()
	}()
	for b := range order {
		<-b.done
		for _, v := range b.recs {
			if err := apply(v); err != nil {
				return err
			}
		}
		if b.err != nil {
			return b.err
		}
		select {
		case free <- b:
		default:
		}
	}
	return nil
}

// histRecord is a history record decoded and, when it was read as a
// record, its bytes (raw, only until it is filed), their hash and where
// its first device ID starts (history.file); idHash is the hash of its
// ID (histIndex.hash), err what checkHistory found wrong with it.
type histRecord struct {
	a      Allocation
	raw    []byte
	sum    uint64
	dev    int
	idHash uint64
	err    error
}

func restoreV2(r *bufio.Reader) (*State, error) {
	sr := newSnapReader(r)
	if _, err := r.ReadByte(); err != nil {
		return nil, errf(ErrSnapshot, "truncated")
	}
	s := New()
	var cfg []byte
	head, err := sr.frame("head", nil)
	if err != nil {
		return nil, err
	}
	err = sr.decodeRecord("head", &dec{}, head, nil, func(d *dec) {
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
	if err := readSection(sr, "host", nil, anyDecoder((*dec).host), s.restoreHost); err != nil {
		return nil, err
	}
	// Every device is one a host lists (checkHostDevices): the devices'
	// map is made to that size, not grown a doubling at a time.
	listed := 0
	for _, h := range s.hosts {
		listed += len(h.Devices)
	}
	s.devices = make(map[string]*Device, listed)
	// The devices come by ID (a snapshot writes them so): their IDs in
	// order need no sort, unless a snapshot wrote them otherwise.
	devices := make([]string, 0, listed)
	fileDevice := func(d *Device) error {
		if err := s.restoreDevice(d); err != nil {
			return err
		}
		devices = append(devices, d.ID)
		return nil
	}
	if err := readSection(sr, "device", nil, anyDecoder((*dec).device), fileDevice); err != nil {
		return nil, err
	}
	if !slices.IsSorted(devices) {
		slices.Sort(devices)
	}
	if err := s.checkHostDevices(); err != nil {
		return nil, err
	}
	if err := s.restoreDrains(c.Drains); err != nil {
		return nil, err
	}
	if err := s.restoreQuotas(c.Quotas); err != nil {
		return nil, err
	}
	if err := s.restoreFairShare(c.FairShare); err != nil {
		return nil, err
	}
	s.preemptWaiting = c.PreemptWaiting
	sr.devs = make(map[string]restoredDev, len(s.devices))
	for id, d := range s.devices { // filing: order-free
		sr.devs[id] = restoredDev{id: d.ID, pool: d.Pool}
	}
	live := newStatsGather()
	fileLive := func(a *Allocation) error {
		if err := s.restoreLive(a); err != nil {
			return err
		}
		s.gatherLive(live, a)
		return nil
	}
	if err := readSection(sr, "live allocation", nil, anyDecoder((*dec).alloc), fileLive); err != nil {
		return nil, err
	}
	putRequest := func(e cacheEntry) error { s.cache.put(e); return nil }
	if err := readSection(sr, "request", nil, anyDecoder((*dec).cacheEntry), putRequest); err != nil {
		return nil, err
	}
	// A history record is kept as its bytes: what it decodes to is
	// scratch, whose strings need not be shared with the state's. So what
	// it repeats is interned in tables of its own, small, not among the
	// hosts' and devices' IDs; its device IDs are still looked up among
	// the devices' (sr.devs), which gives its first device's pool for the
	// statistics too.
	sr.newInterners()
	// A history record is kept and hashed as it was read: what decodes
	// whole is the one encoding of what it decoded to (snapcodec.go).
	// Its hashes (of the record, for the digest; of its ID, for the
	// index) and its checks on its own (checkHistory) are the decoder's
	// work, and so is counting it for the statistics, in a gather of the
	// decoder's own (statsGather). The restoring goroutine, which files
	// the records in turn, is left where they go; the checks against the
	// records before (an ID unseen, no live allocation's) are made once
	// all are in (historyFiler.finish).
	gathers := []*statsGather{live}
	for range sr.in {
		gathers = append(gathers, newStatsGather())
	}
	decodeHistory := func(d *dec, decoder int) histRecord {
		r := histRecord{raw: d.b, sum: recordHash(d.b)}
		d.allocInto(&r.a)
		if d.devLeft > 0 {
			r.dev = len(r.raw) - d.devLeft
		}
		if d.err == nil {
			if r.err = s.checkHistory(&r); r.err == nil {
				r.idHash = s.history.idx.hash(r.a.ID)
				pool := d.first.pool  // statsPool: the first device's,
				if d.first.id == "" { // unless it is gone
					pool = s.statsPool(&r.a)
				}
				gathers[1+decoder].add(&r.a, pool)
			}
		}
		return r
	}
	// The history's list is made to size as the records arrive, a step
	// at a time rather than by doubling: the count is the snapshot's
	// word, which a short snapshot must not turn into much memory, so a
	// step makes room for at most 8 times the entries already in
	// (historyStep at first).
	var left uint64
	filer := historyFiler{s: s}
	fileHistory := func(r histRecord) error {
		if h := s.history; len(h.list) == cap(h.list) {
			filer.reserve(int(min(left, uint64(max(7*len(h.list), historyStep)))))
		}
		left--
		if r.err != nil {
			return r.err
		}
		filer.file(&r)
		return nil
	}
	count := func(n uint64) { left = n }
	err = readSection(sr, "history", count, decodeHistory, fileHistory)
	// The history is indexed beside what restoreFinish does, which reads
	// nothing of it; a fault it finds came before any later one.
	indexed := make(chan error, 1)
	go func(err error) { indexed <- filer.finish(err) }(err)
	if err == nil {
		if _, rerr := r.ReadByte(); rerr != io.EOF {
			err = errf(ErrSnapshot, "bytes after the history")
		}
	}
	if err != nil {
		return nil, cmp.Or(<-indexed, err)
	}
	return s.restoreFinish(gathers, devices, indexed)
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
	if !d.Capabilities.Resources.valid() {
		// What RegisterHost refuses, a snapshot cannot bring in.
		return errf(ErrSnapshot, "device %q has a negative, infinite or NaN capability", d.ID)
	}
	if why := validTopology(d.Topology); why != "" {
		return errf(ErrSnapshot, "device %q: topology: %s", d.ID, why)
	}
	s.devices[d.ID] = d
	s.addClassDevice(d)
	s.agg.countDevice(d, 1)
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
	if !ValidNamespace(a.Namespace) {
		return errf(ErrSnapshot, "allocation %s: namespace %q is not a valid name", a.ID, a.Namespace)
	}
	if a.ModifyIndex > s.last || a.CreateIndex > a.ModifyIndex {
		// A live allocation's next change moves its ModifyIndex past the
		// state's index (snapcache.go counts on it).
		return errf(ErrSnapshot, "allocation %s: created at index %d, changed at %d, in a state at %d", a.ID, a.CreateIndex, a.ModifyIndex, s.last)
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
		if p := a.Preempting; p != nil {
			s.timers.ReplaceOrInsert(timerKey{at: p.Deadline, kind: reclaimTimer, id: a.ID})
			s.reclaims[p.By] = insertSorted(s.reclaims[p.By], a.ID)
		}
	}
	if a.Preempting != nil && a.Status != Active {
		return errf(ErrSnapshot, "allocation %s is %s and preempting", a.ID, a.Status)
	}
	if len(a.Reserved) > 0 && a.Status != Pending || len(a.Hosts) > 0 && a.Status != Active {
		return errf(ErrSnapshot, "allocation %s is %s with gang hosts or a reservation", a.ID, a.Status)
	}
	return nil
}

// checkHistory checks what an ended allocation can be checked for on
// its own, and gives one written before namespaces its namespace (its
// record is then another than the one read).
func (s *State) checkHistory(r *histRecord) error {
	a := &r.a
	if a.Status.Live() {
		return errf(ErrSnapshot, "bad history entry")
	}
	if a.Namespace == "" {
		a.Namespace = DefaultNamespace
		r.raw = nil
	}
	if !ValidNamespace(a.Namespace) {
		return errf(ErrSnapshot, "allocation %s: namespace %q is not a valid name", a.ID, a.Namespace)
	}
	return nil
}

// historyFiler files a restore's history records, checked
// (checkHistory), in turn, and indexes them at once when all are in
// (finish).
type historyFiler struct {
	s      *State
	hashes []uint64 // of the records' IDs, in order
	rec    enc
}

func (f *historyFiler) reserve(n int) {
	f.s.history.reserve(n)
	f.hashes = slices.Grow(f.hashes, n)
}

// file files r: its record as read (r.raw), or encoded afresh when there
// is none or it changed.
func (f *historyFiler) file(r *histRecord) {
	raw, sum, dev := r.raw, r.sum, r.dev
	if raw == nil {
		f.rec.b = f.rec.b[:0]
		dev = f.rec.alloc(&r.a)
		raw, sum = f.rec.b, recordHash(f.rec.b)
	}
	f.s.history.file(raw, sum, dev, r.a.EndedAt)
	f.hashes = append(f.hashes, r.idHash)
}

// finish indexes the records filed and returns what refuses the history
// being restored: err, what stopped the filing (nil if nothing did),
// unless a record filed has the ID of one before it or of a live
// allocation (the live ones are looked up in the history: some ten
// thousand look ups rather than a million). Such a record came before
// the fault that stopped the filing, so its error is the first.
func (f *historyFiler) finish(err error) error {
	if _, dup := f.s.history.indexFiled(f.hashes); dup {
		return errf(ErrSnapshot, "bad history entry")
	}
	for id := range f.s.allocs { // any one: the error names none
		if f.s.history.has(id) {
			return errf(ErrSnapshot, "bad history entry")
		}
	}
	return err
}

// restoreFinish rebuilds the derived state once everything is in (the
// devices' IDs in order), the allocations counted by gathers and the
// history indexed, or refused, by what indexed sends, and checks that it
// holds together (checkLive:
// the history was checked record by record as it was decoded and filed,
// and as it was indexed). The statistics are settled beside the
// devices' indexing: they share nothing. The history's fault comes first
// in the stream, then the check's.
func (s *State) restoreFinish(gathers []*statsGather, devices []string, indexed <-chan error) (*State, error) {
	settled := make(chan struct{})
	go func() {
		defer close(settled)
		s.agg.settle(gathers, s.devices)
	}()
	// The usage of fair share came with the snapshot: reindexing, which
	// rebuilds what each namespace holds, must not move it.
	fair := s.fair
	s.fair = nil
	if err := s.restoreReservations(); err != nil {
		<-settled
		<-indexed
		return nil, err
	}
	for _, id := range devices {
		s.reindex(s.devices[id])
	}
	s.fair = fair
	cerr := s.checkLive(devices)
	<-settled
	if err := <-indexed; err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, errf(ErrSnapshot, "%v", cerr)
	}
	return s, nil
}

// anyDecoder is decode for a section whose records need nothing of the
// decoder's own.
func anyDecoder[T any](decode func(*dec) T) func(*dec, int) T {
	return func(d *dec, _ int) T { return decode(d) }
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
