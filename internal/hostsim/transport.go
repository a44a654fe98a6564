package hostsim

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
)

// errTransportClosed: the transport was shut down (its host was killed).
var errTransportClosed = errors.New("hostsim: gossip transport closed")

// packetQueue is how many received packets a host's transport holds for
// memberlist; a packet from another simulated host that finds it full is
// dropped, as a full socket buffer drops a datagram.
const packetQueue = 512

// maxDatagram is the largest UDP payload: every datagram the servers send
// fits the one read buffer of a listener.
const maxDatagram = 65536

// fabric connects the gossip transports of one simulation: a packet or a
// stream from one simulated host to another is handed over in the process
// instead of through the kernel; anything else (the servers, a killed
// host's address) goes through the host's real UDP and TCP sockets.
type fabric struct {
	mu      sync.RWMutex
	byAddr  map[string]*transport
	dropped atomic.Uint64 // in-process packets dropped on a full queue
}

func newFabric() *fabric { return &fabric{byAddr: map[string]*transport{}} }

func (f *fabric) lookup(addr string) *transport {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.byAddr[addr]
}

// listen opens host gossip listeners on ip:port (port 0: a free one, the
// same for TCP and UDP) and registers them in the fabric.
func (f *fabric) listen(ip string, port int) (memberlist.NodeAwareTransport, error) {
	addr := net.ParseIP(ip)
	if addr == nil {
		return nil, fmt.Errorf("hostsim: gossip bind address %q is not an IP", ip)
	}
	tcp, err := net.ListenTCP("tcp", &net.TCPAddr{IP: addr, Port: port})
	if err != nil {
		return nil, fmt.Errorf("hostsim: gossip TCP listener: %w", err)
	}
	port = tcp.Addr().(*net.TCPAddr).Port
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: addr, Port: port})
	if err != nil {
		tcp.Close()
		return nil, fmt.Errorf("hostsim: gossip UDP listener: %w", err)
	}
	t := &transport{
		fabric:   f,
		key:      net.JoinHostPort(addr.String(), strconv.Itoa(port)),
		udpAddr:  udp.LocalAddr().(*net.UDPAddr),
		tcpAddr:  tcp.Addr(),
		tcp:      tcp,
		udp:      udp,
		packetCh: make(chan *memberlist.Packet, packetQueue),
		streamCh: make(chan net.Conn),
		done:     make(chan struct{}),
	}
	f.mu.Lock()
	f.byAddr[t.key] = t
	f.mu.Unlock()
	t.wg.Add(2)
	go t.readUDP()
	go t.acceptTCP()
	return t, nil
}

// transport is one simulated host's memberlist transport: real UDP and TCP
// listeners on its gossip port, as memberlist's NetTransport has, so the
// servers reach it as they reach an agent; but a received datagram is read
// into the listener's one buffer and copied out at its size (NetTransport
// allocates and clears 64 KiB per datagram), and traffic to another host
// of the same simulation stays in the process.
type transport struct {
	fabric   *fabric
	key      string // ip:port, as memberlist addresses this host
	udpAddr  *net.UDPAddr
	tcpAddr  net.Addr
	tcp      *net.TCPListener
	udp      *net.UDPConn
	packetCh chan *memberlist.Packet
	streamCh chan net.Conn
	done     chan struct{}
	closing  sync.Once
	wg       sync.WaitGroup
}

// FinalAdvertiseAddr is ip and port, or the bound port for port 0 (the
// host's first start on a free port).
func (t *transport) FinalAdvertiseAddr(ip string, port int) (net.IP, int, error) {
	addr := net.ParseIP(ip)
	if addr == nil {
		return nil, 0, fmt.Errorf("hostsim: advertise address %q is not an IP", ip)
	}
	if v4 := addr.To4(); v4 != nil {
		addr = v4
	}
	if port == 0 {
		port = t.udpAddr.Port
	}
	return addr, port, nil
}

func (t *transport) WriteTo(b []byte, addr string) (time.Time, error) {
	return t.WriteToAddress(b, memberlist.Address{Addr: addr})
}

// WriteToAddress hands b to a simulated host at a.Addr, or sends it as a
// datagram.
func (t *transport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	if to := t.fabric.lookup(a.Addr); to != nil {
		p := &memberlist.Packet{Buf: clone(b), From: t.udpAddr, Timestamp: time.Now()}
		select {
		case to.packetCh <- p:
		default:
			t.fabric.dropped.Add(1)
		}
		return p.Timestamp, nil
	}
	udpAddr, err := net.ResolveUDPAddr("udp", a.Addr)
	if err != nil {
		return time.Time{}, err
	}
	_, err = t.udp.WriteTo(b, udpAddr)
	return time.Now(), err
}

func (t *transport) PacketCh() <-chan *memberlist.Packet { return t.packetCh }

func (t *transport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	return t.DialAddressTimeout(memberlist.Address{Addr: addr}, timeout)
}

// DialAddressTimeout connects to a simulated host at a.Addr through a
// pipe, or dials it over TCP.
func (t *transport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	to := t.fabric.lookup(a.Addr)
	if to == nil {
		d := net.Dialer{Timeout: timeout}
		return d.Dial("tcp", a.Addr)
	}
	local, remote := net.Pipe()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	err := errTransportClosed
	select {
	case to.streamCh <- addrConn{Conn: remote, local: to.tcpAddr, remote: t.tcpAddr}:
		return addrConn{Conn: local, local: t.tcpAddr, remote: to.tcpAddr}, nil
	case <-to.done:
	case <-t.done:
	case <-timer.C:
		err = os.ErrDeadlineExceeded
	}
	local.Close()
	remote.Close()
	return nil, fmt.Errorf("hostsim: dial %s: %w", a.Addr, err)
}

func (t *transport) StreamCh() <-chan net.Conn { return t.streamCh }

// Shutdown takes the host out of the fabric, closes its listeners and
// waits for their goroutines.
func (t *transport) Shutdown() error {
	t.closing.Do(func() {
		t.fabric.mu.Lock()
		if t.fabric.byAddr[t.key] == t {
			delete(t.fabric.byAddr, t.key)
		}
		t.fabric.mu.Unlock()
		close(t.done)
		t.tcp.Close()
		t.udp.Close()
	})
	t.wg.Wait()
	return nil
}

func (t *transport) readUDP() {
	defer t.wg.Done()
	buf := make([]byte, maxDatagram)
	for {
		n, from, err := t.udp.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) || !t.pause() {
				return
			}
			continue
		}
		if n < 1 {
			continue
		}
		p := &memberlist.Packet{Buf: clone(buf[:n]), From: from, Timestamp: time.Now()}
		select {
		case t.packetCh <- p:
		case <-t.done:
			return
		}
	}
}

func (t *transport) acceptTCP() {
	defer t.wg.Done()
	for {
		c, err := t.tcp.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || !t.pause() {
				return
			}
			continue
		}
		select {
		case t.streamCh <- c:
		case <-t.done:
			c.Close()
			return
		}
	}
}

// pause waits a little after a failed read or accept (so that a lasting
// error does not spin), and reports false when the transport was shut down
// meanwhile.
func (t *transport) pause() bool {
	timer := time.NewTimer(10 * time.Millisecond)
	defer timer.Stop()
	select {
	case <-t.done:
		return false
	case <-timer.C:
		return true
	}
}

// clone copies b into a slice of its length and capacity.
func clone(b []byte) []byte {
	c := make([]byte, len(b))
	copy(c, b)
	return c
}

// addrConn is one end of an in-process stream, with the TCP addresses of
// the two hosts as its addresses.
type addrConn struct {
	net.Conn
	local, remote net.Addr
}

func (c addrConn) LocalAddr() net.Addr  { return c.local }
func (c addrConn) RemoteAddr() net.Addr { return c.remote }
