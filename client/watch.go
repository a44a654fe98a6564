package client

import (
	"context"
	"math/rand/v2"
	"time"
)

// WatchOptions tune a watch.
type WatchOptions struct {
	// WaitIndex starts the watch after this state index: the first answer
	// comes once the state has moved past it. 0 reads at once first.
	WaitIndex uint64
	// WaitTime is how long each blocking query waits; DefaultWatchWait
	// when zero. A query that times out without a change is asked again.
	WaitTime time.Duration
	// Consistent and MaxStale choose the consistency of each read.
	Consistent bool
	MaxStale   time.Duration
}

// Watch follows a read with blocking queries: it calls read, hands the
// answer to fn, then asks again from the answer's index, so that the next
// answer comes as soon as the state changes (any change: fn compares what
// it cares about). It stops when fn returns false (nil error), when ctx
// ends (ctx's error) or on an error that retrying cannot fix; retryable
// errors (connection failures, no leader) are retried with backoff for as
// long as ctx allows.
//
// An answer whose index is behind the last one (a lagging node) is
// skipped; two in a row mean the cluster's index went back (a rebuilt
// cluster), and the watch starts over from a plain read.
func Watch[T any](ctx context.Context, opts *WatchOptions, read func(context.Context, *QueryOptions) (T, *QueryMeta, error), fn func(T, *QueryMeta) bool) error {
	var o WatchOptions
	if opts != nil {
		o = *opts
	}
	if o.WaitTime <= 0 {
		o.WaitTime = DefaultWatchWait
	}
	index := o.WaitIndex
	behind := 0
	failures := 0
	started := false
	for {
		q := &QueryOptions{Consistent: o.Consistent, MaxStale: o.MaxStale}
		if index > 0 {
			q.WaitIndex, q.WaitTime = index, o.WaitTime
		} else if started && !sleepCtx(ctx, time.Second) {
			// An empty state has index 0, which cannot block: poll.
			return ctx.Err()
		}
		started = true
		v, meta, err := read(ctx, q)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !IsRetryable(err) {
				return err
			}
			failures++
			if !retryPause(ctx, DefaultRetryWait, failures) {
				return ctx.Err()
			}
			continue
		}
		failures = 0
		switch {
		case index > 0 && meta.Index == index:
			continue // the wait ran out without a change
		case meta.Index < index:
			if behind++; behind < 2 {
				continue
			}
		}
		behind = 0
		index = meta.Index
		if !fn(v, meta) {
			return nil
		}
	}
}

// WatchAllocation calls fn with the allocation each time it changes (its
// ModifyIndex moves), starting with its current state (or, with
// opts.WaitIndex, its first state after that index), until fn returns
// false, ctx ends, or the allocation cannot be read (ErrNotFound when the
// history dropped it).
func (c *Client) WatchAllocation(ctx context.Context, id string, opts *WatchOptions, fn func(*Allocation) bool) error {
	var last uint64
	seen := false
	return Watch(ctx, opts, func(ctx context.Context, q *QueryOptions) (*Allocation, *QueryMeta, error) {
		return c.Allocation(ctx, id, q)
	}, func(a *Allocation, _ *QueryMeta) bool {
		if seen && a.ModifyIndex == last {
			return true
		}
		seen, last = true, a.ModifyIndex
		return fn(a)
	})
}

// retryPause waits before the next try of a long-lived read after
// failures in a row: exponential from base, with jitter, at most 5 s. It
// is false when ctx ended first.
func retryPause(ctx context.Context, base time.Duration, failures int) bool {
	bound := min(base<<min(failures, 20), 5*time.Second)
	return sleepCtx(ctx, bound/2+rand.N(bound/2+1))
}
