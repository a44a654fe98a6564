package connlimit

import (
	"bufio"
	"net"
	"net/http"
	"testing"
	"time"
)

func TestPerClientAndTotal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Wrap(ln, Options{PerClient: 2, Total: 3, Refuse: HTTP429})
	defer l.Close()
	accepted := make(chan net.Conn, 10)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	dial := func(local string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	wait := func(ip string, n, total int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			a, b := l.Open(ip)
			if a == n && b == total {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("open from %s: %d of %d, want %d of %d", ip, a, b, n, total)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	refused := func(c net.Conn) {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("refused connection: %v", err)
		}
		res.Body.Close()
		if res.StatusCode != 429 {
			t.Fatalf("status %d", res.StatusCode)
		}
		c.Close()
	}
	a1, a2 := dial("127.0.0.2"), dial("127.0.0.2")
	wait("127.0.0.2", 2, 2)
	refused(dial("127.0.0.2"))
	b1 := dial("127.0.0.1")
	wait("127.0.0.1", 1, 3)
	refused(dial("127.0.0.3")) // the total
	// Closing gives the place back.
	(<-accepted).Close()
	wait("127.0.0.2", 1, 2)
	c := dial("127.0.0.2")
	wait("127.0.0.2", 2, 3)
	for _, x := range []net.Conn{a1, a2, b1, c} {
		x.Close()
	}
}
