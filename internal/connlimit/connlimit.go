// Package connlimit bounds the connections a listener holds open, per
// client IP address and in all. A connection over a limit is answered
// with an HTTP 429 and closed at once, as Nomad does, so that one client's
// slow or idle connections cannot take the file descriptors and request
// slots the others need.
package connlimit

import (
	"net"
	"sync"
	"time"
)

// Options are the limits; 0 is unlimited.
type Options struct {
	// PerClient bounds the connections of one remote IP address.
	PerClient int
	// Total bounds the connections of all clients.
	Total int
	// Refuse, when set, writes the answer to a refused connection before
	// it is closed (e.g. an HTTP 429); it has a short write deadline.
	// Without it the connection is closed with nothing written.
	Refuse func(c net.Conn)
	// OnRefuse, optional, hears of each refused connection.
	OnRefuse func(addr net.Addr, perClient bool)
}

// HTTP429 writes a minimal HTTP/1.1 429 answer with a JSON error, for
// Options.Refuse on a plain-text HTTP listener.
func HTTP429(c net.Conn) {
	const body = `{"error":{"code":"overloaded","message":"too many connections from this address","retryable":true}}` + "\n"
	_, _ = c.Write([]byte("HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
		itoa(len(body)) + "\r\n\r\n" + body))
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// Listener wraps a listener with the limits.
type Listener struct {
	net.Listener
	opts Options

	mu    sync.Mutex
	per   map[string]int
	total int
}

// Wrap returns l with the limits of opts.
func Wrap(l net.Listener, opts Options) *Listener {
	return &Listener{Listener: l, opts: opts, per: map[string]int{}}
}

// Accept returns the next connection within the limits; those over them
// are refused and closed here.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := ipOf(c.RemoteAddr())
		ok, perClient := l.take(key)
		if ok {
			return &conn{Conn: c, release: func() { l.give(key) }}, nil
		}
		if l.opts.OnRefuse != nil {
			l.opts.OnRefuse(c.RemoteAddr(), perClient)
		}
		if l.opts.Refuse != nil {
			_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			l.opts.Refuse(c)
		}
		_ = c.Close()
	}
}

// Open is the number of connections open from addr's IP address and in
// all.
func (l *Listener) Open(ip string) (fromIP, total int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.per[ip], l.total
}

func (l *Listener) take(key string) (ok, perClient bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.opts.PerClient > 0 && l.per[key] >= l.opts.PerClient {
		return false, true
	}
	if l.opts.Total > 0 && l.total >= l.opts.Total {
		return false, false
	}
	l.per[key]++
	l.total++
	return true, false
}

func (l *Listener) give(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if l.per[key]--; l.per[key] <= 0 {
		delete(l.per, key)
	}
}

func ipOf(a net.Addr) string {
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// conn gives its place back once, when closed.
type conn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
