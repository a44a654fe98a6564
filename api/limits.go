package api

import (
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

// errClientOverloaded is the 429 of a client address that holds its share
// of the request slots: the others are still served.
var errClientOverloaded = &apiError{
	status: http.StatusTooManyRequests, code: wire.CodeOverloaded,
	msg: "too many requests in flight from this address; retry shortly",
}

// admit takes the request slots of a regular or blocking request: one of
// the client address's share (Options.MaxInFlightPerClient) and one of
// the node's. It notes the outcome for /v1/ready's overload report.
func (s *Server) admit(r *http.Request) (release func(), err error) {
	client := clientAddr(r)
	if !s.clients.take(client) {
		return func() {}, errClientOverloaded
	}
	rel, ok := s.acquire(isBlocking(r))
	s.load.note(!ok)
	if !ok {
		s.clients.give(client)
		return func() {}, errOverloaded
	}
	return func() { rel(); s.clients.give(client) }, nil
}

// clientAddr is the IP address a request came from.
func clientAddr(r *http.Request) string {
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return host
	}
	return r.RemoteAddr
}

// clientSlots counts the requests in flight per client address.
type clientSlots struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

func (c *clientSlots) take(addr string) bool {
	if c.max <= 0 {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[addr] >= c.max {
		return false
	}
	c.n[addr]++
	return true
}

func (c *clientSlots) give(addr string) {
	if c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[addr]--; c.n[addr] <= 0 {
		delete(c.n, addr)
	}
}

// loadWindow counts, per second over the last few seconds, the requests
// that asked for a slot and those refused because none was free.
type loadWindow struct {
	mu      sync.Mutex
	now     func() time.Time
	buckets [loadSeconds]loadBucket
}

type loadBucket struct {
	sec            int64
	total, refused int
}

const (
	// loadSeconds is the window /v1/ready judges overload over.
	loadSeconds = 5
	// loadMinRequests is the fewest requests in the window for the share
	// refused to count.
	loadMinRequests = 20
)

func (l *loadWindow) note(refused bool) {
	sec := l.now().Unix()
	l.mu.Lock()
	b := &l.buckets[sec%loadSeconds]
	if b.sec != sec {
		*b = loadBucket{sec: sec}
	}
	b.total++
	if refused {
		b.refused++
	}
	l.mu.Unlock()
}

// counts sums the window.
func (l *loadWindow) counts() (total, refused int) {
	sec := l.now().Unix()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range l.buckets {
		if sec-b.sec < loadSeconds {
			total += b.total
			refused += b.refused
		}
	}
	return total, refused
}

// overloaded says why the node cannot take more work, "" when it can:
// every regular slot is taken, or more than half the requests of the last
// few seconds were refused for want of one.
func (s *Server) overloaded() string {
	if n := len(s.inFlight); n >= cap(s.inFlight) {
		return fmt.Sprintf("overloaded: all %d request slots are in use", n)
	}
	total, refused := s.load.counts()
	if total >= loadMinRequests && refused*2 > total {
		return fmt.Sprintf("overloaded: %d of %d requests refused in the last %d s", refused, total, loadSeconds)
	}
	return ""
}
