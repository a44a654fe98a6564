package events

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

func ev(index uint64, key string) fsm.Event {
	return fsm.Event{Topic: fsm.TopicAllocation, Type: fsm.EventPlaced, Key: key, Index: index}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// indexes reads from sub until it has n batches, and returns their
// indexes.
func indexes(t *testing.T, sub *Subscription, n int) []uint64 {
	t.Helper()
	var out []uint64
	for len(out) < n {
		bs, err := sub.Next(ctxT(t))
		if err != nil {
			t.Fatalf("after %v: %v", out, err)
		}
		for _, sg := range bs {
			for _, b := range sg.Batches {
				out = append(out, b.Index)
			}
		}
	}
	return out
}

func TestOrderAndResume(t *testing.T) {
	b := New(100, 0, 0)
	live, err := b.Subscribe(0)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 5; i++ {
		b.Publish(i*10, []fsm.Event{ev(i*10, "a"), ev(i*10, "b")})
	}
	b.Publish(60, nil) // no events: no batch
	if got := indexes(t, live, 5); !slices.Equal(got, []uint64{10, 20, 30, 40, 50}) {
		t.Fatalf("live subscriber read %v", got)
	}
	for _, tc := range []struct {
		after uint64
		want  []uint64
	}{
		{after: 25, want: []uint64{30, 40, 50}},
		{after: 30, want: []uint64{40, 50}},
		{after: 1, want: []uint64{10, 20, 30, 40, 50}},
	} {
		sub, err := b.Subscribe(tc.after)
		if err != nil {
			t.Fatal(err)
		}
		if got := indexes(t, sub, len(tc.want)); !slices.Equal(got, tc.want) {
			t.Fatalf("after %d: read %v, want %v", tc.after, got, tc.want)
		}
	}
	// A resumed reader goes on with what is published later.
	resumed, _ := b.Subscribe(45)
	b.Publish(55, []fsm.Event{ev(55, "c")})
	if got := indexes(t, resumed, 2); !slices.Equal(got, []uint64{50, 55}) {
		t.Fatalf("resumed after 45: %v", got)
	}
	// Subscribing with 0 starts with what comes next.
	sub, _ := b.Subscribe(0)
	b.Publish(200, []fsm.Event{ev(200, "d")})
	if got := indexes(t, sub, 1); !slices.Equal(got, []uint64{200}) {
		t.Fatalf("from now: %v", got)
	}
}

// A replica behind the index a reader resumes after publishes the
// batches up to it later: the reader does not get them.
func TestResumeOnReplicaBehind(t *testing.T) {
	b := New(100, 0, 0)
	b.Publish(1, []fsm.Event{ev(1, "a")})
	sub, err := b.Subscribe(3)
	if err != nil {
		t.Fatal(err)
	}
	for i := uint64(2); i <= 5; i++ {
		b.Publish(i, []fsm.Event{ev(i, "a")})
	}
	if got := indexes(t, sub, 2); !slices.Equal(got, []uint64{4, 5}) {
		t.Fatalf("resumed after 3 on a replica at 1: %v", got)
	}
}

func TestIndexTooOld(t *testing.T) {
	b := New(4, 7, 0) // knows nothing up to 7
	if _, err := b.Subscribe(3); !errors.Is(err, ErrIndexTooOld) {
		t.Fatalf("before the start: %v", err)
	}
	if _, err := b.Subscribe(7); err != nil {
		t.Fatalf("at the start: %v", err)
	}
	for i := uint64(8); i <= 13; i++ {
		b.Publish(i, []fsm.Event{ev(i, "x")})
	}
	// 4 events held: 10..13; the events of 8 and 9 are gone.
	if b.Oldest() != 9 {
		t.Fatalf("oldest %d, want 9", b.Oldest())
	}
	if _, err := b.Subscribe(8); !errors.Is(err, ErrIndexTooOld) {
		t.Fatalf("after a dropped batch: %v", err)
	}
	sub, err := b.Subscribe(9)
	if err != nil {
		t.Fatal(err)
	}
	if got := indexes(t, sub, 4); !slices.Equal(got, []uint64{10, 11, 12, 13}) {
		t.Fatalf("read %v", got)
	}
}

// A reader that falls behind by more than the buffer is cut off, and
// publishing never waited for it.
func TestSlowSubscriberCut(t *testing.T) {
	b := New(8, 0, 0)
	slow, _ := b.Subscribe(0)
	fast, _ := b.Subscribe(0)
	var read atomic.Int64
	done := make(chan error, 1)
	go func() {
		for {
			bs, err := fast.Next(context.Background())
			if err != nil {
				done <- err
				return
			}
			for _, sg := range bs {
				read.Add(int64(len(sg.Batches)))
			}
			if read.Load() == 1000 {
				done <- nil
				return
			}
		}
	}()
	for i := uint64(1); i <= 1000; i++ {
		b.Publish(i, []fsm.Event{ev(i, "x")})
		for read.Load() < int64(i)-4 { // the fast reader keeps up
			time.Sleep(10 * time.Microsecond)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("the reader that kept up: %v", err)
	}
	if _, err := slow.Next(ctxT(t)); !errors.Is(err, ErrSlow) {
		t.Fatalf("the slow reader: %v", err)
	}
}

func TestResetAndClose(t *testing.T) {
	b := New(100, 0, 0)
	sub, _ := b.Subscribe(0)
	b.Publish(1, []fsm.Event{ev(1, "x")})
	b.Reset(50)
	if _, err := sub.Next(ctxT(t)); !errors.Is(err, ErrReset) {
		t.Fatalf("after a reset: %v", err)
	}
	if _, err := b.Subscribe(10); !errors.Is(err, ErrIndexTooOld) {
		t.Fatalf("before the reset's index: %v", err)
	}
	sub, err := b.Subscribe(50)
	if err != nil {
		t.Fatal(err)
	}
	b.Publish(51, []fsm.Event{ev(51, "y")})
	if got := indexes(t, sub, 1); !slices.Equal(got, []uint64{51}) {
		t.Fatalf("after the reset: %v", got)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := sub.Next(context.Background())
		waiting <- err
	}()
	b.Close()
	if err := <-waiting; !errors.Is(err, ErrClosed) {
		t.Fatalf("a waiting reader at close: %v", err)
	}
	if _, err := b.Subscribe(0); !errors.Is(err, ErrClosed) {
		t.Fatalf("subscribe after close: %v", err)
	}
}

func TestNextEndsWithContext(t *testing.T) {
	b := New(10, 0, 0)
	sub, _ := b.Subscribe(0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := sub.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next with nothing published: %v", err)
	}
}

func TestMemoOncePerBatch(t *testing.T) {
	b := New(10, 0, 0)
	s1, _ := b.Subscribe(0)
	s2, _ := b.Subscribe(0)
	b.Publish(1, []fsm.Event{ev(1, "x")})
	calls := 0
	f := func(evs []fsm.Event) any { calls++; return len(evs) }
	for _, s := range []*Subscription{s1, s2} {
		bs, err := s.Next(ctxT(t))
		if err != nil || len(bs) != 1 || len(bs[0].Batches) != 1 || bs[0].Batches[0].Memo(f).(int) != 1 {
			t.Fatalf("%v %v", bs, err)
		}
	}
	if calls != 1 {
		t.Fatalf("memo computed %d times", calls)
	}
}

// A reader of one topic is not woken by batches without it, and then
// reads every batch since.
func TestOnlyTopicWakes(t *testing.T) {
	b := New(100, 0, 0)
	sub, _ := b.Subscribe(0)
	sub.Only(fsm.TopicLeader)
	b.mu.Lock()
	leader, all := b.wakeOf(fsm.TopicLeader), b.wakeOf("")
	b.mu.Unlock()
	closed := func(ch chan struct{}) bool {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	b.Publish(1, []fsm.Event{ev(1, "a")})
	if closed(leader) || !closed(all) {
		t.Fatalf("an Allocation batch: Leader readers woken %v, all readers %v", closed(leader), closed(all))
	}
	b.Publish(2, []fsm.Event{{Topic: fsm.TopicLeader, Type: fsm.EventElected, Key: "s1", Index: 2}})
	if !closed(leader) {
		t.Fatal("a Leader batch did not wake the Leader readers")
	}
	if got := indexes(t, sub, 2); !slices.Equal(got, []uint64{1, 2}) {
		t.Fatalf("the Leader reader read %v", got)
	}
}

// Batches published within the seal interval are read as one segment,
// whose memo is made once for every reader of it whole; a reader that
// began inside a segment gets a part of it, with a memo of its own.
func TestSegmentsSealTogether(t *testing.T) {
	b := New(100, 0, time.Hour) // sealed by size only: a quarter of 100
	s1, _ := b.Subscribe(0)
	s2, _ := b.Subscribe(0)
	for i := uint64(1); i <= 10; i++ {
		b.Publish(i, []fsm.Event{ev(i, "a"), ev(i, "b")})
	}
	late, _ := b.Subscribe(5)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if bs, err := s1.Next(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("an open segment was read: %v %v", bs, err)
	}
	for i := uint64(11); i <= 13; i++ { // 26 events: a quarter of the buffer
		b.Publish(i, []fsm.Event{ev(i, "a"), ev(i, "b")})
	}
	calls := 0
	f := func(bs []Batch) any { calls++; return len(bs) }
	for _, s := range []*Subscription{s1, s2} {
		sg, err := s.Next(ctxT(t))
		if err != nil || len(sg) != 1 || !sg[0].Whole() || sg[0].Memo(f).(int) != 13 {
			t.Fatalf("%+v %v", sg, err)
		}
	}
	if calls != 1 {
		t.Fatalf("a whole segment's memo was made %d times", calls)
	}
	sg, err := late.Next(ctxT(t))
	if err != nil || len(sg) != 1 || sg[0].Whole() || sg[0].Memo(f).(int) != 8 || sg[0].Batches[0].Index != 6 {
		t.Fatalf("the reader from index 5: %+v %v", sg, err)
	}
}

// A segment is sealed the interval after its first batch, even when
// nothing else is published, and its readers are woken then.
func TestSegmentSealsInTime(t *testing.T) {
	b := New(100, 0, 30*time.Millisecond)
	sub, _ := b.Subscribe(0)
	start := time.Now()
	b.Publish(1, []fsm.Event{ev(1, "a")})
	b.Publish(2, []fsm.Event{ev(2, "a")})
	sg, err := sub.Next(ctxT(t))
	if err != nil || len(sg) != 1 || len(sg[0].Batches) != 2 {
		t.Fatalf("%+v %v", sg, err)
	}
	if waited := time.Since(start); waited < 30*time.Millisecond {
		t.Fatalf("read %v after the first batch, before the seal", waited)
	}
	b.Publish(3, []fsm.Event{ev(3, "a")})
	if got := indexes(t, sub, 1); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("the next segment: %v", got)
	}
}

// Spread readers take phases spread evenly over the seal interval, and
// each reads a seal's segment no sooner than its phase after the seal.
func TestSpreadPhases(t *testing.T) {
	const seal = 40 * time.Millisecond
	b := New(100, 0, seal)
	const n = 500
	subs := make([]*Subscription, n)
	phases := make([]time.Duration, n)
	for i := range subs {
		subs[i], _ = b.Subscribe(0)
		subs[i].Spread()
		phases[i] = subs[i].phase
	}
	slices.Sort(phases)
	gap := phases[0] + seal - phases[n-1]
	for i := 1; i < n; i++ {
		gap = max(gap, phases[i]-phases[i-1])
	}
	if phases[0] < 0 || phases[n-1] >= seal || gap > 3*seal/n {
		t.Fatalf("phases from %v to %v, largest gap %v: not spread over %v", phases[0], phases[n-1], gap, seal)
	}

	late := subs[1] // the second phase: 0.618 of the interval
	start := time.Now()
	b.Publish(1, []fsm.Event{ev(1, "a")})
	if got := indexes(t, late, 1); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("read %v", got)
	}
	if waited, want := time.Since(start), seal+late.phase; waited < want {
		t.Fatalf("read %v after the publish, before the seal and the phase (%v)", waited, want)
	}
}

// A segment partly dropped from the buffer is no longer shared whole.
func TestSegmentPartlyDropped(t *testing.T) {
	b := New(8, 0, time.Hour) // a segment is sealed at 2 events
	b.Publish(1, []fsm.Event{ev(1, "a")})
	b.Publish(2, []fsm.Event{ev(2, "a")})
	sub, _ := b.Subscribe(1)
	seven := make([]fsm.Event, 7)
	for i := range seven {
		seven[i] = ev(3, "x")
	}
	b.Publish(3, seven) // drops 1: the first segment keeps only 2
	sg, err := sub.Next(ctxT(t))
	if err != nil || len(sg) != 2 || sg[0].Whole() || len(sg[0].Batches) != 1 || sg[0].Batches[0].Index != 2 || !sg[1].Whole() {
		t.Fatalf("%+v %v", sg, err)
	}
}

// With Quiet, Next answers ErrQuiet when nothing is sealed within the
// period, and goes on reading after it.
func TestQuietPeriod(t *testing.T) {
	b := New(10, 0, 0)
	sub, _ := b.Subscribe(0)
	sub.Quiet(20 * time.Millisecond)
	for range 2 { // the timer is used again
		if _, err := sub.Next(ctxT(t)); !errors.Is(err, ErrQuiet) {
			t.Fatalf("Next with nothing published: %v", err)
		}
	}
	b.Publish(1, []fsm.Event{ev(1, "a")})
	if got := indexes(t, sub, 1); !slices.Equal(got, []uint64{1}) {
		t.Fatalf("after a quiet period: %v", got)
	}
}

// Kinds is one event of each topic and namespace, the same for a whole
// segment (made at the seal) and for a part of one.
func TestSegmentKinds(t *testing.T) {
	b := New(100, 0, time.Hour)
	whole, _ := b.Subscribe(0)
	nsEv := func(i uint64, topic fsm.Topic, ns string) fsm.Event {
		return fsm.Event{Topic: topic, Namespace: ns, Index: i, Key: "k"}
	}
	b.Publish(1, []fsm.Event{nsEv(1, fsm.TopicAllocation, "a"), nsEv(1, fsm.TopicDevice, "")})
	part, _ := b.Subscribe(1)
	b.Publish(2, []fsm.Event{nsEv(2, fsm.TopicAllocation, "b"), nsEv(2, fsm.TopicAllocation, "a")})
	b.Publish(3, make([]fsm.Event, 22)) // 26 events: sealed; 22 of no topic or namespace
	kinds := func(sub *Subscription) (out []string) {
		sg, err := sub.Next(ctxT(t))
		if err != nil || len(sg) != 1 {
			t.Fatalf("%+v %v", sg, err)
		}
		for _, k := range sg[0].Kinds() {
			out = append(out, string(k.Topic)+"/"+k.Namespace)
		}
		return out
	}
	want := []string{"Allocation/a", "Device/", "Allocation/b", "/"}
	if got := kinds(whole); !slices.Equal(got, want) {
		t.Fatalf("whole segment: %v, want %v", got, want)
	}
	if got, want := kinds(part), []string{"Allocation/b", "Allocation/a", "/"}; !slices.Equal(got, want) {
		t.Fatalf("part of it: %v, want %v", got, want)
	}
}

// Random publishes, subscriptions from random indexes and reads, against
// the list of every batch published: each reader gets the batches after
// its index, in order and without a gap, until it is cut off, and only
// when a batch it had yet to read was dropped; every segment's Kinds are
// those of its batches; a whole segment's batches are the same for every
// reader, and stay as published while later batches come and go.
func TestRandomReads(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		b := New(8+rng.IntN(40), 0, time.Hour) // sealed by size: a quarter of the buffer
		type reader struct {
			sub  *Subscription
			want int // position in published of the next batch it must get
			cut  bool
		}
		var published []Batch
		var readers []*reader
		var whole [][]Batch // every whole segment read, as read
		topics := []fsm.Topic{fsm.TopicAllocation, fsm.TopicDevice, fsm.TopicQueue}
		for step := range 400 {
			switch r := rng.IntN(10); {
			case r < 5:
				index := uint64(len(published) + 1)
				evs := make([]fsm.Event, 1+rng.IntN(4))
				for i := range evs {
					evs[i] = fsm.Event{Topic: topics[rng.IntN(len(topics))], Namespace: []string{"a", "b", ""}[rng.IntN(3)], Index: index, Key: fmt.Sprint(step)}
				}
				b.Publish(index, evs)
				published = append(published, Batch{Index: index, Events: slices.Clone(evs)})
			case r < 7:
				after := uint64(rng.IntN(len(published) + 1))
				sub, err := b.Subscribe(after)
				if errors.Is(err, ErrIndexTooOld) {
					if after >= b.Oldest() {
						t.Fatalf("seed %d: Subscribe(%d) too old, oldest %d", seed, after, b.Oldest())
					}
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if after == 0 {
					after = uint64(len(published))
				}
				sub.Quiet(time.Microsecond)
				readers = append(readers, &reader{sub: sub, want: int(after)})
			default:
				if len(readers) == 0 {
					continue
				}
				rd := readers[rng.IntN(len(readers))]
				if rd.cut {
					continue
				}
				segs, err := rd.sub.Next(context.Background())
				switch {
				case errors.Is(err, ErrQuiet):
					continue
				case errors.Is(err, ErrSlow):
					if uint64(rd.want+1) > b.Oldest() {
						t.Fatalf("seed %d: reader at batch %d cut off, but the buffer holds from index %d on", seed, rd.want+1, b.Oldest()+1)
					}
					rd.cut = true
					continue
				case err != nil:
					t.Fatal(err)
				}
				for _, sg := range segs {
					if len(sg.Batches) == 0 {
						t.Fatalf("seed %d: an empty segment", seed)
					}
					var kinds []string
					for _, k := range sg.Kinds() {
						kinds = append(kinds, string(k.Topic)+"/"+k.Namespace)
					}
					var fromBatches []string
					for _, k := range kindsOf(sg.Batches) {
						fromBatches = append(fromBatches, string(k.Topic)+"/"+k.Namespace)
					}
					if !slices.Equal(kinds, fromBatches) {
						t.Fatalf("seed %d: segment kinds %v, its batches' %v", seed, kinds, fromBatches)
					}
					for _, bt := range sg.Batches {
						if rd.want >= len(published) || bt.Index != published[rd.want].Index || len(bt.Events) != len(published[rd.want].Events) {
							t.Fatalf("seed %d: reader got index %d, want the batch at position %d of %d", seed, bt.Index, rd.want, len(published))
						}
						rd.want++
					}
					if sg.Whole() {
						whole = append(whole, sg.Batches)
					}
				}
			}
		}
		for _, bs := range whole { // as published, whatever came and went since
			for _, bt := range bs {
				if bt.Index == 0 || bt.Index > uint64(len(published)) {
					t.Fatalf("seed %d: a shared segment holds a batch of index %d now", seed, bt.Index)
				}
				p := published[bt.Index-1]
				if len(bt.Events) != len(p.Events) || bt.Events[0].Key != p.Events[0].Key {
					t.Fatalf("seed %d: a shared segment's batch %d changed", seed, bt.Index)
				}
			}
		}
	}
}
