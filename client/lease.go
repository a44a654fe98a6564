package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// LeaseRenewer keeps an allocation's lease alive: it renews the lease every
// third of its TTL until it is stopped, its context ends, or the lease is
// lost. After a failed renewal it tries again sooner, for as long as the
// lease lasts.
type LeaseRenewer struct {
	c      *Client
	id     string
	ttl    time.Duration
	cancel context.CancelFunc
	done   chan struct{}

	mu       sync.Mutex
	err      error
	expires  time.Time
	renewals int
}

// NewLeaseRenewer starts renewing the lease of an active allocation with
// ttl (0: the request's lease TTL). It returns an ErrInvalid error when
// neither gives a TTL.
func (c *Client) NewLeaseRenewer(ctx context.Context, a *Allocation, ttl time.Duration) (*LeaseRenewer, error) {
	if ttl <= 0 {
		ttl = a.Request.LeaseTTL.Std()
	}
	if ttl <= 0 {
		return nil, &APIError{Code: ErrInvalid.Code, Message: "allocation " + a.ID + " has no lease TTL; give one to the renewer"}
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &LeaseRenewer{c: c, id: a.ID, ttl: ttl, cancel: cancel, done: make(chan struct{})}
	// Until the first renewal, trust the lease the allocation has, as far
	// as this clock can tell.
	r.expires = time.Now().Add(ttl)
	if !a.LeaseExpiresAt.IsZero() {
		r.expires = time.Now().Add(min(ttl, time.Until(a.LeaseExpiresAt)))
	}
	go r.run(rctx)
	return r, nil
}

func (r *LeaseRenewer) run(ctx context.Context) {
	defer close(r.done)
	interval := r.ttl / 3
	retry := max(r.ttl/10, 10*time.Millisecond)
	wait := interval
	for {
		if !sleepCtx(ctx, wait) {
			return
		}
		sent := time.Now()
		rctx, cancel := context.WithDeadline(ctx, r.expiry())
		_, _, err := r.c.Renew(rctx, r.id, r.ttl)
		cancel()
		switch {
		case err == nil:
			r.mu.Lock()
			r.expires = sent.Add(r.ttl)
			r.renewals++
			r.mu.Unlock()
			wait = interval
			continue
		case ctx.Err() != nil:
			return
		case errors.Is(err, ErrNotActive), errors.Is(err, ErrNotFound):
			r.stop(fmt.Errorf("%w: %s: %w", ErrLeaseLost, r.id, err))
			return
		case !time.Now().Before(r.expiry()):
			r.stop(fmt.Errorf("%w: %s: no renewal before the lease ran out: %w", ErrLeaseLost, r.id, err))
			return
		}
		r.c.log.Debug("lease renewal failed; retrying", "allocation", r.id, "error", err)
		wait = min(retry, time.Until(r.expiry()))
	}
}

func (r *LeaseRenewer) expiry() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.expires
}

func (r *LeaseRenewer) stop(err error) {
	r.mu.Lock()
	r.err = err
	r.mu.Unlock()
}

// Done is closed when the renewer stops: Stop, Release, its context
// ended, or the lease was lost (Err says which).
func (r *LeaseRenewer) Done() <-chan struct{} { return r.done }

// Err is why the renewer stopped: nil when it was stopped or its context
// ended, an error matching ErrLeaseLost when the lease was lost.
func (r *LeaseRenewer) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Renewals counts the successful renewals.
func (r *LeaseRenewer) Renewals() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.renewals
}

// Expires is when the lease runs out by this machine's clock unless it is
// renewed again.
func (r *LeaseRenewer) Expires() time.Time { return r.expiry() }

// Stop stops renewing (the allocation stays until its lease runs out) and
// returns Err.
func (r *LeaseRenewer) Stop() error {
	r.cancel()
	<-r.done
	return r.Err()
}

// Release stops renewing and releases the allocation.
func (r *LeaseRenewer) Release(ctx context.Context) (*Allocation, error) {
	if err := r.Stop(); err != nil {
		return nil, err
	}
	a, _, err := r.c.Release(ctx, r.id)
	return a, err
}
