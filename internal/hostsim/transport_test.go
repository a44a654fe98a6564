package hostsim

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

func listenT(t *testing.T, f *fabric) *transport {
	t.Helper()
	nt, err := f.listen("127.0.0.1", 0)
	if err != nil {
		t.Fatal(err)
	}
	tr := nt.(*transport)
	t.Cleanup(func() { _ = tr.Shutdown() })
	return tr
}

func recvPacket(t *testing.T, tr *transport) *memberlist.Packet {
	t.Helper()
	select {
	case p := <-tr.PacketCh():
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no packet")
		return nil
	}
}

// TestTransportPackets: a packet between two hosts of a fabric arrives
// from the sender's gossip address, a copy of what was sent; a datagram
// from outside the process arrives through the socket at its exact size;
// a host's datagram to an address outside the fabric leaves through its
// socket.
func TestTransportPackets(t *testing.T) {
	f := newFabric()
	a, b := listenT(t, f), listenT(t, f)

	msg := []byte("ping")
	if _, err := a.WriteToAddress(msg, memberlist.Address{Addr: b.key}); err != nil {
		t.Fatal(err)
	}
	msg[0] = 'X' // the sender may reuse its buffer
	p := recvPacket(t, b)
	if string(p.Buf) != "ping" || p.From.String() != a.key {
		t.Fatalf("in-process packet %q from %v, want %q from %s", p.Buf, p.From, "ping", a.key)
	}

	out, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	big := bytes.Repeat([]byte{7}, 3000)
	if _, err := out.WriteTo(big, b.udpAddr); err != nil {
		t.Fatal(err)
	}
	p = recvPacket(t, b)
	if !bytes.Equal(p.Buf, big) || cap(p.Buf) != len(big) || p.From.String() != out.LocalAddr().String() {
		t.Fatalf("datagram of %d bytes (cap %d) from %v, want %d from %v", len(p.Buf), cap(p.Buf), p.From, len(big), out.LocalAddr())
	}

	if _, err := b.WriteTo([]byte("ack"), out.LocalAddr().String()); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	_ = out.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, from, err := out.ReadFrom(buf)
	if err != nil || string(buf[:n]) != "ack" || from.String() != b.key {
		t.Fatalf("read %q from %v (%v), want %q from %s", buf[:n], from, err, "ack", b.key)
	}
}

// TestTransportStreams: a stream between two hosts of a fabric is a pipe
// with the hosts' addresses at its ends; to a shut down host the address
// is dialled over TCP, and fails.
func TestTransportStreams(t *testing.T) {
	f := newFabric()
	a, b := listenT(t, f), listenT(t, f)
	done := make(chan error, 1)
	go func() {
		select {
		case c := <-b.StreamCh():
			defer c.Close()
			if c.RemoteAddr().String() != a.key {
				done <- io.ErrUnexpectedEOF
				return
			}
			buf := make([]byte, 5)
			if _, err := io.ReadFull(c, buf); err != nil {
				done <- err
				return
			}
			_, err := c.Write(bytes.ToUpper(buf))
			done <- err
		case <-time.After(10 * time.Second):
			done <- io.ErrNoProgress
		}
	}()
	c, err := a.DialAddressTimeout(memberlist.Address{Addr: b.key}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.RemoteAddr().String() != b.key {
		t.Fatalf("stream to %v, want %s", c.RemoteAddr(), b.key)
	}
	if _, err := c.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "HELLO" {
		t.Fatalf("answer %q (%v)", got, err)
	}
	if err := <-done; err != nil {
		t.Fatal("receiver:", err)
	}

	if err := b.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if f.lookup(b.key) != nil {
		t.Fatal("a shut down host is still in the fabric")
	}
	if c, err := a.DialAddressTimeout(memberlist.Address{Addr: b.key}, time.Second); err == nil {
		c.Close()
		t.Fatal("dialled a shut down host")
	}
}

// TestTransportFullQueueDrops: a host whose queue is full drops further
// packets from other hosts instead of blocking the sender, and counts
// them.
func TestTransportFullQueueDrops(t *testing.T) {
	f := newFabric()
	a, b := listenT(t, f), listenT(t, f)
	for range packetQueue + 3 {
		if _, err := a.WriteToAddress([]byte{1}, memberlist.Address{Addr: b.key}); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.dropped.Load(); got != 3 {
		t.Fatalf("dropped %d, want 3", got)
	}
}
