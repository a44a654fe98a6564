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
	"sync"

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
)

// DefaultSize is the number of events a buffer holds by default.
const DefaultSize = 16384

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

// Buffer holds the latest batches, up to size events in all (a batch
// larger than that alone is kept whole).
type Buffer struct {
	mu      sync.Mutex
	size    int
	batches []Batch // oldest first; batches[head:] are live
	head    int
	count   int // events in batches[head:]
	// first is the number of batches dropped since the buffer began: the
	// position of batches[head] in the stream of all batches.
	first uint64
	// floor is the highest index whose events may be missing: the index
	// the buffer started or was reset at, or the last dropped batch's.
	floor uint64
	// epoch grows at every Reset: a subscription of an older epoch is
	// cut off.
	epoch uint64
	wake  chan struct{}
	// topicWake wakes the readers of one topic only: closed when a
	// batch with an event of the topic is published (made on demand).
	topicWake map[fsm.Topic]chan struct{}
	closed    bool
}

// New returns a buffer of size events (DefaultSize when size ≤ 0) that
// starts after index start: events up to start are not known to it.
func New(size int, start uint64) *Buffer {
	if size <= 0 {
		size = DefaultSize
	}
	return &Buffer{size: size, floor: start, wake: make(chan struct{})}
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
	b.wakeAll(evs)
}

// wakeAll wakes the readers of every topic, and of the topics of evs
// (all of them when evs is nil). Called with mu held.
func (b *Buffer) wakeAll(evs []fsm.Event) {
	close(b.wake)
	b.wake = make(chan struct{})
	if evs == nil {
		for t, ch := range b.topicWake {
			close(ch)
			delete(b.topicWake, t)
		}
		return
	}
	for i := range evs {
		if ch, ok := b.topicWake[evs[i].Topic]; ok {
			close(ch)
			delete(b.topicWake, evs[i].Topic)
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
}

// Only says the reader wants events of topic t alone, so that batches
// without one do not wake it (Next still returns every batch; the
// reader filters). Readers of several topics are woken by every batch.
func (s *Subscription) Only(t fsm.Topic) { s.topic = t }

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

// Next returns the batches published since the last call, waiting for
// one until ctx ends (then it returns nil and ctx's error). It answers
// ErrSlow when batches the subscriber had yet to read were dropped,
// ErrReset after a Reset and ErrClosed once the buffer is closed.
func (s *Subscription) Next(ctx context.Context) ([]Batch, error) {
	b := s.b
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
		live := b.batches[b.head:]
		i := int(s.next - b.first)
		for i < len(live) && live[i].Index <= s.after {
			i++
		}
		s.next = b.first + uint64(i)
		if i < len(live) {
			out := append([]Batch(nil), live[i:]...)
			s.next = b.first + uint64(len(live))
			b.mu.Unlock()
			return out, nil
		}
		wake := b.wakeOf(s.topic)
		b.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
