// Package events keeps a node's recent events, the changes its replica
// applied (fsm.Event), in a bounded buffer that the event stream's
// subscribers read from. Publishing never waits for a subscriber: it
// appends to the buffer and wakes whoever waits. A subscriber reads at
// its own pace from its own position; one that falls so far behind that
// the events it has yet to read have left the buffer is cut off
// (ErrSlow), and one that asks to start before the oldest event the
// buffer still holds is refused (ErrIndexTooOld).
package events

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// Errors of a subscription.
var (
	// ErrIndexTooOld: events after the index asked for have left the
	// buffer (or were never in it: applied before this node started or
	// restored a snapshot). Read the state, then stream from its index.
	ErrIndexTooOld = errors.New("events after that index are no longer buffered")
	// ErrSlow: the subscriber fell behind by more than the buffer holds.
	ErrSlow = errors.New("subscriber too slow: the events it had yet to read left the buffer")
	// ErrReset: the replica was replaced by a snapshot, so events between
	// the subscriber's position and the snapshot were never seen here.
	ErrReset = errors.New("the replica restored a snapshot: events before it are not known")
	// ErrClosed: the buffer was closed (the node is shutting down).
	ErrClosed = errors.New("event buffer closed")
	// ErrQuiet: nothing was sealed for the subscription within its quiet
	// period (Quiet); it goes on.
	ErrQuiet = errors.New("no events within the quiet period")
)

// DefaultSize is the number of events a buffer holds by default.
const DefaultSize = 16384

// DefaultSeal is how long a segment stays open by default: the most an
// event waits before its readers are woken.
const DefaultSeal = 50 * time.Millisecond

// Batch is the events of one log index, in the order they happened.
type Batch struct {
	Index  uint64
	Events []fsm.Event
	memo   *memo
}

type memo struct {
	once sync.Once
	v    any
}

// Memo returns f of the batch's events, computed once for all the
// batch's readers (the stream encodes each batch once, not once per
// subscriber).
func (b Batch) Memo(f func([]fsm.Event) any) any {
	if b.memo == nil {
		return f(b.Events)
	}
	b.memo.once.Do(func() { b.memo.v = f(b.Events) })
	return b.memo.v
}

// Segment is consecutive batches sealed together: readers are woken once
// per segment, not once per batch, and a segment read whole has its
// encoding made once for all its readers (Memo). Its Batches are shared
// with the segment's other readers: read them, never write them.
type Segment struct {
	Batches []Batch
	memo    *memo // nil: a part of a segment (the reader began inside it)
	kinds   []*fsm.Event
}

// Kinds is one event of each topic and namespace the segment holds, in
// the order they first appear: a reader whose filter looks at nothing
// else judges the segment by them (made once at the seal for a whole
// segment).
func (s Segment) Kinds() []*fsm.Event {
	if s.kinds != nil || len(s.Batches) == 0 {
		return s.kinds
	}
	return kindsOf(s.Batches)
}

func kindsOf(bs []Batch) []*fsm.Event {
	var out []*fsm.Event
	for _, b := range bs {
		for i := range b.Events {
			ev := &b.Events[i]
			if !slices.ContainsFunc(out, func(k *fsm.Event) bool { return k.Topic == ev.Topic && k.Namespace == ev.Namespace }) {
				out = append(out, ev)
			}
		}
	}
	return out
}

// Whole says the segment was read whole, so that its Memo is shared.
func (s Segment) Whole() bool { return s.memo != nil }

// Memo returns f of the segment's batches, computed once for every reader
// of the whole segment (and for each call on a part of one).
func (s Segment) Memo(f func([]Batch) any) any {
	if s.memo == nil {
		return f(s.Batches)
	}
	s.memo.once.Do(func() { s.memo.v = f(s.Batches) })
	return s.memo.v
}

// sealed is a segment in the buffer: batch positions [start, end).
// batches is them, and kinds their Kinds, shared by every reader of the
// whole segment (never written after the seal); nil once it is a part.
type sealed struct {
	start, end uint64
	memo       *memo
	batches    []Batch
	kinds      []*fsm.Event
}

// Buffer holds the latest batches, up to size events in all (a batch
// larger than that alone is kept whole). Batches are sealed into
// segments: a segment opens with a batch and is sealed seal later (at
// once when seal is 0, or when it holds a quarter of the buffer), and
// only sealed batches are read.
type Buffer struct {
	mu      sync.Mutex
	size    int
	seal    time.Duration
	batches []Batch // oldest first; batches[head:] are live
	head    int
	count   int // events in batches[head:]
	// segs[segHead:] are the sealed segments of the live batches, in
	// order; the batches from position sealedTo on are the open segment.
	segs     []sealed
	segHead  int
	sealedTo uint64
	// openEvents and openTopics are the open segment's events and
	// topics; gen grows at every seal or reset, so that the timer of a
	// segment already sealed does nothing.
	openEvents int
	openTopics []fsm.Topic
	gen        uint64
	// first is the number of batches dropped since the buffer began: the
	// position of batches[head] in the stream of all batches.
	first uint64
	// floor is the highest index whose events may be missing: the index
	// the buffer started or was reset at, or the last dropped batch's.
	floor uint64
	// epoch grows at every Reset: a subscription of an older epoch is
	// cut off.
	epoch uint64
	// sealedAt is when the last seal was; spread counts the
	// subscriptions that asked for a phase (Spread).
	sealedAt time.Time
	spread   uint64
	wake     chan struct{}
	// topicWake wakes the readers of one topic only: closed when a
	// batch with an event of the topic is published (made on demand).
	topicWake map[fsm.Topic]chan struct{}
	closed    bool
}

// New returns a buffer of size events (DefaultSize when size ≤ 0) that
// starts after index start (events up to start are not known to it) and
// seals a segment seal after it opened (0: every batch at once).
func New(size int, start uint64, seal time.Duration) *Buffer {
	if size <= 0 {
		size = DefaultSize
	}
	return &Buffer{size: size, seal: max(seal, 0), floor: start, wake: make(chan struct{})}
}

// Publish appends the events of one index, which must be above every
// index published before. An empty batch only moves nothing.
func (b *Buffer) Publish(index uint64, evs []fsm.Event) {
	if len(evs) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.batches = append(b.batches, Batch{Index: index, Events: evs, memo: &memo{}})
	b.count += len(evs)
	opened := b.openEvents == 0
	b.openEvents += len(evs)
	for i := range evs {
		if !slices.Contains(b.openTopics, evs[i].Topic) {
			b.openTopics = append(b.openTopics, evs[i].Topic)
		}
	}
	b.drop()
	switch {
	case b.seal == 0 || b.openEvents >= b.size/4:
		b.sealOpen()
	case opened:
		gen := b.gen
		time.AfterFunc(b.seal, func() { b.sealIfOpen(gen) })
	}
}

// drop drops the oldest batches beyond size, and the segments they
// leave. Called with mu held.
func (b *Buffer) drop() {
	for b.count > b.size && len(b.batches)-b.head > 1 {
		old := b.batches[b.head]
		b.batches[b.head] = Batch{}
		b.head++
		b.first++
		b.count -= len(old.Events)
		b.floor = old.Index
	}
	if b.head > len(b.batches)/2 && b.head > 64 {
		b.batches = append([]Batch(nil), b.batches[b.head:]...)
		b.head = 0
	}
	for b.segHead < len(b.segs) && b.segs[b.segHead].end <= b.first {
		b.segs[b.segHead] = sealed{}
		b.segHead++
	}
	if b.segHead < len(b.segs) && b.segs[b.segHead].start < b.first {
		b.segs[b.segHead] = sealed{start: b.first, end: b.segs[b.segHead].end} // a part now
	}
	if b.segHead > len(b.segs)/2 && b.segHead > 64 {
		b.segs = append([]sealed(nil), b.segs[b.segHead:]...)
		b.segHead = 0
	}
	if b.sealedTo < b.first {
		b.sealedTo = b.first
		b.openEvents = b.count // a segment longer than the buffer lost its head
	}
}

// sealIfOpen seals the open segment if it is still the one of gen.
func (b *Buffer) sealIfOpen(gen uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed && b.gen == gen {
		b.sealOpen()
	}
}

// sealOpen seals the open segment and wakes its readers. Called with mu
// held.
func (b *Buffer) sealOpen() {
	end := b.first + uint64(len(b.batches)-b.head)
	if end > b.sealedTo {
		bs := slices.Clone(b.batches[b.head+int(b.sealedTo-b.first):])
		b.segs = append(b.segs, sealed{start: b.sealedTo, end: end, memo: &memo{}, batches: bs, kinds: kindsOf(bs)})
		b.sealedTo = end
	}
	b.sealedAt = time.Now()
	b.wakeAll(b.openTopics)
	b.openEvents, b.openTopics = 0, b.openTopics[:0]
	b.gen++
}

// wakeAll wakes the readers of every topic, and of topics (all of them
// when topics is nil). Called with mu held.
func (b *Buffer) wakeAll(topics []fsm.Topic) {
	close(b.wake)
	b.wake = make(chan struct{})
	if topics == nil {
		for t, ch := range b.topicWake {
			close(ch)
			delete(b.topicWake, t)
		}
		return
	}
	for _, t := range topics {
		if ch, ok := b.topicWake[t]; ok {
			close(ch)
			delete(b.topicWake, t)
		}
	}
}

// wakeOf is the channel a reader of topic t waits on ("" or an unknown
// topic: every publish). Called with mu held.
func (b *Buffer) wakeOf(t fsm.Topic) chan struct{} {
	if t == "" {
		return b.wake
	}
	if b.topicWake == nil {
		b.topicWake = map[fsm.Topic]chan struct{}{}
	}
	ch, ok := b.topicWake[t]
	if !ok {
		ch = make(chan struct{})
		b.topicWake[t] = ch
	}
	return ch
}

// Reset forgets every event: the replica restored a snapshot at index.
// Subscribers are cut off with ErrReset.
func (b *Buffer) Reset(index uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.first += uint64(len(b.batches) - b.head)
	b.batches, b.head, b.count = nil, 0, 0
	b.segs, b.segHead, b.sealedTo = nil, 0, b.first
	b.openEvents, b.openTopics = 0, nil
	b.gen++
	b.floor = max(b.floor, index)
	b.epoch++
	b.wakeAll(nil)
}

// Close ends every subscription with ErrClosed.
func (b *Buffer) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed {
		b.closed = true
		b.wakeAll(nil)
	}
}

// Oldest is the index after which the buffer holds every event.
func (b *Buffer) Oldest() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.floor
}

// Subscription reads the buffer from a position.
type Subscription struct {
	b     *Buffer
	next  uint64 // position of the next batch to read, in all batches
	epoch uint64
	// after: batches of this index or below are skipped (a replica
	// behind the index asked for publishes them later).
	after uint64
	// topic, when set, is the one topic the reader wants: it is woken
	// only by batches with an event of it (Only).
	topic fsm.Topic
	// quiet, when set, is how long Next waits before ErrQuiet (Quiet),
	// on a timer of the subscription's own, kept from call to call.
	quiet time.Duration
	timer *time.Timer
	// phase, when set, is how long after a seal the reader reads what
	// it sealed (Spread), on a timer of its own.
	phase time.Duration
	pace  *time.Timer
}

// Quiet makes Next answer ErrQuiet when nothing was sealed for it within
// d (0: never), so that a stream can send a heartbeat.
func (s *Subscription) Quiet(d time.Duration) { s.quiet = d }

// Only says the reader wants events of topic t alone, so that batches
// without one do not wake it (Next still returns every batch; the
// reader filters). Readers of several topics are woken by every batch.
func (s *Subscription) Only(t fsm.Topic) { s.topic = t }

// spreadStep is the golden ratio's fraction: the phases of the n-th
// spread subscription, n·spreadStep modulo 1 of the seal interval, lie
// evenly over it for any number of subscriptions.
const spreadStep = 0.6180339887498949

// Spread gives the reader a phase of its own within the seal interval:
// Next hands it a seal's segments that long after the seal, not at
// once. Readers that write what they read to a socket then take their
// turns over the interval instead of all running at each seal, which
// would hold up everything else on the node for as long as they take
// together. An event then waits at most two seal intervals.
func (s *Subscription) Spread() {
	b := s.b
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.spread
	b.spread++
	s.phase = time.Duration(math.Mod(float64(n)*spreadStep, 1) * float64(b.seal))
}

// Subscribe starts reading after index after: the first batch read is the
// first one above it. after 0 starts with what is published from now on.
// It answers ErrIndexTooOld when events above after may have left the
// buffer.
func (b *Buffer) Subscribe(after uint64) (*Subscription, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil, ErrClosed
	}
	sub := &Subscription{b: b, epoch: b.epoch, after: after}
	live := b.batches[b.head:]
	if after == 0 {
		sub.next = b.first + uint64(len(live))
		return sub, nil
	}
	if after < b.floor {
		return nil, fmt.Errorf("%w: index %d; the buffer holds the events after index %d", ErrIndexTooOld, after, b.floor)
	}
	i := 0
	for i < len(live) && live[i].Index <= after {
		i++
	}
	sub.next = b.first + uint64(i)
	return sub, nil
}

// Next returns the segments sealed since the last call (the first of
// them a part, when the reader began inside it), waiting for one until
// ctx ends (then it returns nil and ctx's error) or, with Quiet, until
// the quiet period passes (then nil and ErrQuiet). With Spread it returns
// them no sooner than its phase after the last seal. It answers ErrSlow
// when batches the subscriber had yet to read were dropped, ErrReset
// after a Reset and ErrClosed once the buffer is closed.
func (s *Subscription) Next(ctx context.Context) ([]Segment, error) {
	b := s.b
	var quiet <-chan time.Time
	if s.quiet > 0 {
		arm(&s.timer, s.quiet)
		defer s.timer.Stop()
		quiet = s.timer.C
	}
	paced := s.phase == 0
	for {
		b.mu.Lock()
		switch {
		case b.closed:
			b.mu.Unlock()
			return nil, ErrClosed
		case s.epoch != b.epoch:
			b.mu.Unlock()
			return nil, ErrReset
		case s.next < b.first:
			b.mu.Unlock()
			return nil, ErrSlow
		}
		for s.next < b.sealedTo && b.batches[b.head+int(s.next-b.first)].Index <= s.after {
			s.next++
		}
		if s.next < b.sealedTo && !paced {
			// once per call, lest seals that come faster than the
			// phase keep the reader waiting
			paced = true
			if wait := s.phase - time.Since(b.sealedAt); wait > 0 {
				b.mu.Unlock()
				if err := s.sleep(ctx, wait); err != nil {
					return nil, err
				}
				continue
			}
		}
		if s.next < b.sealedTo {
			out := b.segments(s.next)
			s.next = b.sealedTo
			b.mu.Unlock()
			return out, nil
		}
		wake := b.wakeOf(s.topic)
		b.mu.Unlock()
		select {
		case <-wake:
		case <-quiet:
			return nil, ErrQuiet
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// arm starts *t to fire in d, made on first use and kept from call to
// call.
func arm(t **time.Timer, d time.Duration) {
	if *t == nil {
		*t = time.NewTimer(d)
	} else {
		(*t).Reset(d)
	}
}

// sleep waits d, or until ctx ends.
func (s *Subscription) sleep(ctx context.Context, d time.Duration) error {
	arm(&s.pace, d)
	select {
	case <-s.pace.C:
		return nil
	case <-ctx.Done():
		s.pace.Stop()
		return ctx.Err()
	}
}

// segments returns the sealed batches from position from on, as the
// segments they belong to. Called with mu held.
func (b *Buffer) segments(from uint64) []Segment {
	segs := b.segs[b.segHead:]
	k := sort.Search(len(segs), func(i int) bool { return segs[i].end > from })
	out := make([]Segment, 0, len(segs)-k)
	for _, sg := range segs[k:] {
		if sg.batches != nil && from <= sg.start {
			out = append(out, Segment{Batches: sg.batches, memo: sg.memo, kinds: sg.kinds})
			continue
		}
		start := max(sg.start, from)
		lo, hi := b.head+int(start-b.first), b.head+int(sg.end-b.first)
		out = append(out, Segment{Batches: slices.Clone(b.batches[lo:hi])})
	}
	return out
}
