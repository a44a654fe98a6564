package integration

// Network partitions with iptables. Every process of a cluster runs under
// a group ID of its own (its user stays root); a partition is a set of
// DROP rules in a chain of this test process, hooked into OUTPUT, each
// matching the packets that one process's sockets send (owner match on
// the group) to another process's Raft, RPC and gossip ports on
// 127.0.0.1 (TCP and gossip's UDP). Cutting both directions drops the
// traffic of established connections too, as a real partition does; the
// test's own clients (group 0) still reach every process. Healing
// flushes the chain; the chain is removed when the test ends, and chains
// left by test processes that died are removed at the next start.

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// partitioner cuts the network between processes.
type partitioner struct {
	chain string
	base  uint32

	mu   sync.Mutex
	gids map[string]uint32 // process name -> group ID
}

// chainPrefix names the chains of this test; the test process ID follows.
const chainPrefix = "dmsc-nemesis-"

// newPartitioner sets up the chain, or says why partitions are not
// possible here (not root, no iptables, no owner match).
func newPartitioner(t testing.TB) (*partitioner, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("partitions need root (iptables, and running agents under their own group)")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		return nil, fmt.Errorf("partitions need iptables: %v", err)
	}
	removeStaleChains()
	p := &partitioner{
		chain: chainPrefix + strconv.Itoa(os.Getpid()),
		base:  3_000_000 + uint32(os.Getpid()%100_000)*16,
		gids:  map[string]uint32{},
	}
	if err := iptables("-N", p.chain); err != nil {
		return nil, err
	}
	if err := iptables("-I", "OUTPUT", "1", "-j", p.chain); err != nil {
		_ = iptables("-X", p.chain)
		return nil, err
	}
	t.Cleanup(p.remove)
	// Probe the matches the rules use.
	if err := iptables(append([]string{"-A", p.chain}, dropRule(p.base, "tcp", "1,2,3")...)...); err != nil {
		return nil, fmt.Errorf("iptables owner and multiport matches: %w", err)
	}
	if err := iptables("-F", p.chain); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *partitioner) remove() {
	_ = iptables("-D", "OUTPUT", "-j", p.chain)
	_ = iptables("-F", p.chain)
	_ = iptables("-X", p.chain)
}

// removeStaleChains removes the chains of test processes that are gone.
func removeStaleChains() {
	out, err := exec.Command("iptables", "-w", "-S").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || f[0] != "-N" || !strings.HasPrefix(f[1], chainPrefix) {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimPrefix(f[1], chainPrefix))
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		_ = iptables("-D", "OUTPUT", "-j", f[1])
		_ = iptables("-F", f[1])
		_ = iptables("-X", f[1])
	}
}

func iptables(args ...string) error {
	cmd := exec.Command("iptables", append([]string{"-w"}, args...)...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("iptables %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(buf.String()))
	}
	return nil
}

func dropRule(gid uint32, proto, ports string) []string {
	r := []string{"-p", proto, "-d", "127.0.0.1"}
	if strings.Contains(ports, ",") {
		r = append(r, "-m", "multiport", "--dports", ports)
	} else {
		r = append(r, "--dport", ports)
	}
	return append(r, "-m", "owner", "--gid-owner", strconv.FormatUint(uint64(gid), 10), "-j", "DROP")
}

// attach makes every process of ps run under a group of its own from its
// next start on.
func (p *partitioner) attach(ps []*Process) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, proc := range ps {
		gid, ok := p.gids[proc.Name]
		if !ok {
			gid = p.base + uint32(len(p.gids))
			p.gids[proc.Name] = gid
		}
		uid := uint32(os.Getuid())
		proc.BeforeStart = func(cmd *exec.Cmd) {
			cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uid, Gid: gid}
		}
	}
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// dropFrom lists the rules that drop what from sends to to.
func (p *partitioner) dropFrom(from, to *Process) [][]string {
	gid := p.gids[from.Name]
	tcp := []string{port(to.RPCAddr), port(to.GossipAddr)}
	if to.RaftAddr != "" {
		tcp = append(tcp, port(to.RaftAddr))
	}
	return [][]string{
		dropRule(gid, "tcp", strings.Join(tcp, ",")),
		dropRule(gid, "udp", port(to.GossipAddr)),
	}
}

// cut drops all traffic between every process of a and every one of b,
// in both directions, in addition to the cuts in force.
func (p *partitioner) cut(a, b []*Process) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, x := range a {
		for _, y := range b {
			for _, r := range append(p.dropFrom(x, y), p.dropFrom(y, x)...) {
				if err := iptables(append([]string{"-A", p.chain}, r...)...); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// heal removes every cut.
func (p *partitioner) heal() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return iptables("-F", p.chain)
}
