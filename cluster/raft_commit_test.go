package cluster

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/fsm"
)

// newTestNetTransport is a Raft network transport on 127.0.0.1 whose
// streams close the connections they accepted, as a node's do.
func newTestNetTransport(t *testing.T, timeout time.Duration) *raft.NetworkTransport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: newRaftStream(ln, ln.Addr(), nil), MaxPool: 2, Timeout: timeout, Logger: hclog.NewNullLogger(),
	})
}

// transportPair returns a plain network transport to send from and a
// wrapped one to receive on, both closed when the test ends.
func transportPair(t *testing.T) (*raft.NetworkTransport, *commitBoundTransport) {
	sender := newTestNetTransport(t, 5*time.Second)
	receiver := newCommitBoundTransport(newTestNetTransport(t, 5*time.Second), hclog.NewNullLogger())
	t.Cleanup(func() {
		sender.CloseStreams()
		sender.Close()
		receiver.CloseStreams()
		receiver.Close()
	})
	return sender, receiver
}

// TestAppendEntriesCommitIsBounded: a follower never learns a commit index
// beyond the last entry a request carries, so it cannot commit entries of
// its own that the leader never matched.
func TestAppendEntriesCommitIsBounded(t *testing.T) {
	sender := newTestNetTransport(t, time.Second)
	receiver := newCommitBoundTransport(newTestNetTransport(t, time.Second), hclog.NewNullLogger())
	defer func() {
		sender.CloseStreams()
		sender.Close()
		receiver.Close()
	}()

	for _, tc := range []struct {
		prev, entries, commit, want uint64
	}{
		{prev: 10, entries: 0, commit: 20, want: 10}, // nothing carried: up to the matched entry
		{prev: 10, entries: 3, commit: 20, want: 13}, // up to the last entry carried
		{prev: 10, entries: 3, commit: 12, want: 12}, // below: unchanged
		{prev: 0, entries: 0, commit: 0, want: 0},
	} {
		req := &raft.AppendEntriesRequest{
			RPCHeader: raft.RPCHeader{ID: []byte("s9"), Addr: []byte(sender.LocalAddr())},
			Term:      5, PrevLogEntry: tc.prev, PrevLogTerm: 4, LeaderCommitIndex: tc.commit,
		}
		for i := uint64(1); i <= tc.entries; i++ {
			req.Entries = append(req.Entries, &raft.Log{Index: tc.prev + i, Term: 5, Type: raft.LogCommand})
		}
		errc := make(chan error, 1)
		go func() {
			var resp raft.AppendEntriesResponse
			errc <- sender.AppendEntries("s1", receiver.LocalAddr(), req, &resp)
		}()
		select {
		case rpc := <-receiver.Consumer():
			got := rpc.Command.(*raft.AppendEntriesRequest)
			if got.LeaderCommitIndex != tc.want {
				t.Errorf("prev %d, %d entries, commit %d: raft sees commit %d, want %d", tc.prev, tc.entries, tc.commit, got.LeaderCommitIndex, tc.want)
			}
			rpc.Respond(&raft.AppendEntriesResponse{Term: 5, Success: true}, nil)
		case <-time.After(5 * time.Second):
			t.Fatal("no request reached the consumer")
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// TestTransportCloseWaitsForHeartbeats: a heartbeat the network transport
// is handling when the node stops (Raft's handler writes the term to the
// stable store) holds Close until it is done, so the stores close after
// it; without the fence Close returned at once and a late heartbeat
// panicked Raft on a closed store.
func TestTransportCloseWaitsForHeartbeats(t *testing.T) {
	sender := newTestNetTransport(t, 5*time.Second)
	defer func() {
		sender.CloseStreams()
		sender.Close()
	}()
	receiver := newCommitBoundTransport(newTestNetTransport(t, 5*time.Second), hclog.NewNullLogger())
	receiver.setReplica(&replicaView{
		term: func() uint64 { return 5 }, applied: func() uint64 { return 0 }, following: func() bool { return true },
	})
	entered, release := make(chan struct{}), make(chan struct{})
	receiver.SetHeartbeatHandler(func(rpc raft.RPC) {
		close(entered)
		<-release
		rpc.Respond(&raft.AppendEntriesResponse{Term: 5, Success: true}, nil)
	})
	go func() {
		var resp raft.AppendEntriesResponse
		heartbeat := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("s9"), Addr: []byte(sender.LocalAddr())}, Term: 5}
		_ = sender.AppendEntries("s1", receiver.LocalAddr(), heartbeat, &resp)
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the heartbeat never reached the handler")
	}
	closed := make(chan struct{})
	go func() {
		receiver.CloseStreams()
		receiver.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a heartbeat was being handled")
	case <-time.After(200 * time.Millisecond):
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return once the heartbeat was handled")
	}
}

// TestHeartbeatThatChangesTheTermGoesToTheMainLoop: only a heartbeat
// that changes neither the node's term nor its role is handled on the
// transport's goroutine; one of a newer term, or one that reaches a node
// that does not follow, goes where Raft's main loop takes requests, so
// that a leader never numbers its entries with a term changed under it.
func TestHeartbeatThatChangesTheTermGoesToTheMainLoop(t *testing.T) {
	sender, receiver := transportPair(t)
	var following atomic.Bool
	receiver.setReplica(&replicaView{
		term: func() uint64 { return 3 }, applied: func() uint64 { return 0 }, following: following.Load,
	})
	fast := make(chan uint64, 1)
	receiver.SetHeartbeatHandler(func(rpc raft.RPC) {
		term := rpc.Command.(*raft.AppendEntriesRequest).Term
		fast <- term
		rpc.Respond(&raft.AppendEntriesResponse{Term: term}, nil)
	})
	for _, tc := range []struct {
		term      uint64
		following bool
		fast      bool
	}{
		{term: 3, following: true, fast: true},
		{term: 2, following: true, fast: true},
		{term: 2, following: false, fast: true},
		{term: 4, following: true, fast: false},
		{term: 4, following: false, fast: false},
		{term: 3, following: false, fast: false},
	} {
		following.Store(tc.following)
		done := make(chan error, 1)
		go func() {
			var resp raft.AppendEntriesResponse
			heartbeat := &raft.AppendEntriesRequest{RPCHeader: raft.RPCHeader{ID: []byte("s9"), Addr: []byte(sender.LocalAddr())}, Term: tc.term}
			done <- sender.AppendEntries("s1", receiver.LocalAddr(), heartbeat, &resp)
		}()
		select {
		case term := <-fast:
			if !tc.fast {
				t.Fatalf("a heartbeat of term %d (node at term 3, following %v) was handled on the fast path", term, tc.following)
			}
		case rpc := <-receiver.Consumer():
			if tc.fast {
				t.Fatalf("a heartbeat of term %d (node at term 3, following %v) went to the main loop", tc.term, tc.following)
			}
			rpc.Respond(&raft.AppendEntriesResponse{Term: tc.term}, nil)
		case <-time.After(10 * time.Second):
			t.Fatalf("a heartbeat of term %d reached neither the handler nor the main loop", tc.term)
		}
		if err := <-done; err != nil {
			t.Fatalf("heartbeat of term %d: %v", tc.term, err)
		}
	}
}

// TestStaleSnapshotIsNotInstalled: an InstallSnapshot request whose
// snapshot ends at or before the replica's applied index is answered as
// installed, its data read to the end, without reaching Raft; a newer one
// reaches Raft, and the next request waits until Raft has answered it, so
// that a stale snapshot sent on another connection meanwhile is judged
// against what Raft installed.
func TestStaleSnapshotIsNotInstalled(t *testing.T) {
	sender, receiver := transportPair(t)
	var applied atomic.Uint64
	applied.Store(100)
	receiver.setReplica(&replicaView{
		term: func() uint64 { return 3 }, applied: applied.Load, following: func() bool { return true },
		header: raft.RPCHeader{ID: []byte("s1"), Addr: []byte(receiver.LocalAddr())},
	})
	data := bytes.Repeat([]byte("snapshot"), 1<<17) // 1 MiB: more than the socket buffers hold
	send := func(term, index uint64) (chan raft.InstallSnapshotResponse, chan error) {
		req := &raft.InstallSnapshotRequest{
			RPCHeader: raft.RPCHeader{ID: []byte("s9"), Addr: []byte(sender.LocalAddr())},
			Term:      term, LastLogIndex: index, LastLogTerm: term, Size: int64(len(data)),
		}
		respc, errc := make(chan raft.InstallSnapshotResponse, 1), make(chan error, 1)
		go func() {
			var resp raft.InstallSnapshotResponse
			err := sender.InstallSnapshot("s1", receiver.LocalAddr(), req, &resp, bytes.NewReader(data))
			respc <- resp
			errc <- err
		}()
		return respc, errc
	}
	answered := func(respc chan raft.InstallSnapshotResponse, errc chan error, what string) {
		t.Helper()
		select {
		case err := <-errc:
			if resp := <-respc; err != nil || !resp.Success || resp.Term != 3 {
				t.Fatalf("%s: answered %+v, %v; want installed", what, resp, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no answer", what)
		}
	}
	toRaft := func(what string) raft.RPC {
		t.Helper()
		select {
		case rpc := <-receiver.Consumer():
			return rpc
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not reach Raft", what)
		}
		return raft.RPC{}
	}
	notToRaft := func(what string) {
		t.Helper()
		select {
		case rpc := <-receiver.Consumer():
			t.Fatalf("%s reached Raft: %+v", what, rpc.Command)
		case <-time.After(100 * time.Millisecond):
		}
	}

	// Older than the applied state, or at it: answered here.
	for _, idx := range []uint64{60, 100} {
		respc, errc := send(3, idx)
		answered(respc, errc, fmt.Sprintf("snapshot at %d", idx))
		notToRaft(fmt.Sprintf("a snapshot at %d, applied 100,", idx))
	}

	// Of an older term: Raft refuses it itself.
	_, _ = send(2, 60)
	rpc := toRaft("a snapshot of an older term")
	_, _ = io.Copy(io.Discard, rpc.Reader)
	rpc.Respond(&raft.InstallSnapshotResponse{Term: 3}, nil)

	// Newer: to Raft, which installs it while a stale one (older than
	// what it installs, newer than what was applied before) comes.
	newer, newerErr := send(3, 150)
	rpc = toRaft("a newer snapshot")
	stale, staleErr := send(3, 120)
	notToRaft("a request sent while Raft installs a snapshot")
	if _, err := io.Copy(io.Discard, rpc.Reader); err != nil {
		t.Fatal(err)
	}
	applied.Store(150)
	rpc.Respond(&raft.InstallSnapshotResponse{Term: 3, Success: true}, nil)
	answered(newer, newerErr, "the newer snapshot")
	answered(stale, staleErr, "the snapshot at 120 once 150 is installed")
	notToRaft("a snapshot at 120, 150 installed,")
}

// TestStaleSnapshotDoesNotTakeAReplicaBack: a follower that is sent,
// late, a snapshot of the current term older than what it applied (as a
// leader's request that waited in its socket buffer while it was frozen
// is) keeps its state; hashicorp/raft alone would restore it.
func TestStaleSnapshotDoesNotTakeAReplicaBack(t *testing.T) {
	tc := newTestCluster(t, nil)
	nodes := tc.servers(3)
	leader := tc.waitLeader(nodes...)
	mustApply(t, leader, staticHost("h1", gpu("h1-gpu0", 80), gpu("h1-gpu1", 80)))
	waitSame(t, nodes...)
	var old []byte
	oldIndex, _ := leader.fsm.Read(func(s *fsm.State) { old = s.SnapshotBytes() })
	a := mustApply(t, leader, gpuRequest(40)).Allocation
	waitSame(t, nodes...)
	f := followers(leader, nodes...)[0]
	applied, _ := f.fsm.Indexes()

	sender := newTestNetTransport(t, 5*time.Second)
	defer func() {
		sender.CloseStreams()
		sender.Close()
	}()
	term := f.raft.CurrentTerm()
	req := &raft.InstallSnapshotRequest{
		RPCHeader:       raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte(leader.cfg.NodeID), Addr: []byte(leader.raftAddr)},
		SnapshotVersion: 1, Term: term, Leader: []byte(leader.raftAddr),
		LastLogIndex: oldIndex, LastLogTerm: term, Size: int64(len(old)),
		Configuration:      raft.EncodeConfiguration(leader.raft.GetConfiguration().Configuration()),
		ConfigurationIndex: 1,
	}
	var resp raft.InstallSnapshotResponse
	if err := sender.InstallSnapshot(raft.ServerID(f.cfg.NodeID), raft.ServerAddress(f.raftAddr), req, &resp, bytes.NewReader(old)); err != nil || !resp.Success {
		t.Fatalf("install: %+v, %v", resp, err)
	}
	stateOf(t, f, func(s *fsm.State) {
		if _, ok := s.Allocation(a.ID); !ok {
			t.Fatalf("%s went back to the state at index %d: allocation %s is gone", f.cfg.NodeID, oldIndex, a.ID)
		}
	})
	if now, _ := f.fsm.Indexes(); now < applied {
		t.Fatalf("%s applied index went from %d to %d", f.cfg.NodeID, applied, now)
	}
	mustApply(t, leader, gpuRequest(40))
	waitSame(t, nodes...)
}
