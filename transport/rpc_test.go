package transport

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/dmsc/dmsc/fsm"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeNode answers the RPC from canned values.
type fakeNode struct {
	applied  []fsm.Command
	applyErr error
	restored []byte
}

func (f *fakeNode) RPCApply(ctx context.Context, req ApplyRequest) (ApplyResponse, error) {
	if f.applyErr != nil {
		return ApplyResponse{}, f.applyErr
	}
	c, err := fsm.Decode(req.Command)
	if err != nil {
		return ApplyResponse{}, err
	}
	f.applied = append(f.applied, c)
	if _, ok := c.(*fsm.Release); ok {
		return NewApplyResponse(fsm.Result{Index: 9, Err: &fsm.Error{Code: fsm.ErrNotActive.Code, Message: "not active"}}), nil
	}
	return NewApplyResponse(fsm.Result{Index: 7, Allocation: &fsm.Allocation{ID: "a1", Status: fsm.Active}}), nil
}

func (f *fakeNode) RPCReadIndex(ctx context.Context) (uint64, error) { return 42, nil }

func (f *fakeNode) RPCInventory(ctx context.Context) (InventoryResponse, error) {
	return InventoryResponse{Host: fsm.HostSpec{ID: "h1"}, Devices: []fsm.DeviceSpec{{ID: "d1", Type: fsm.GPU}}}, nil
}

func (f *fakeNode) RPCStatus(ctx context.Context) (StatusResponse, error) {
	return StatusResponse{ID: "s1", Server: true, HasState: true, Leader: "s2"}, nil
}

func (f *fakeNode) RPCRemovePeer(ctx context.Context, id string) error {
	if id == "" {
		return &fsm.Error{Code: fsm.ErrInvalid.Code, Message: "empty id"}
	}
	return errors.New("disk on fire")
}

func (f *fakeNode) RPCRestore(ctx context.Context, r io.Reader) error {
	b, err := io.ReadAll(r)
	f.restored = b
	return err
}

func serve(t *testing.T, h RPCHandler) (string, *RPCClient) {
	t.Helper()
	c := NewRPCClient(nil)
	return serveWith(t, h, c), c
}

// serveWith serves h on a port of 127.0.0.1 and returns its address; the
// cleanup closes c and shuts the server down.
func serveWith(t *testing.T, h RPCHandler, c *RPCClient) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := ServeRPC(context.Background(), ln, h, nil)
	t.Cleanup(func() {
		c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Error(err)
		}
	})
	return ln.Addr().String()
}

func TestRPCRoundTrips(t *testing.T) {
	node := &fakeNode{}
	addr, c := serve(t, node)
	ctx := context.Background()

	cmd := &fsm.Allocate{Request: fsm.Request{Claims: []fsm.Claim{{Type: fsm.GPU, Count: 1}}}}
	fsm.SetRequestID(cmd, "r1")
	data, _ := fsm.Encode(cmd)
	resp, err := c.Apply(ctx, addr, ApplyRequest{Command: data, LeaderOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	res := resp.Result()
	if res.Index != 7 || res.Allocation.ID != "a1" || res.Err != nil {
		t.Fatalf("result %+v", res)
	}
	if len(node.applied) != 1 || fsm.RequestIDOf(node.applied[0]) != "r1" {
		t.Fatalf("applied %+v", node.applied)
	}
	// A state machine refusal is a result, not a transport error.
	data, _ = fsm.Encode(&fsm.Release{AllocationID: "a1"})
	resp, err = c.Apply(ctx, addr, ApplyRequest{Command: data})
	if err != nil || !errors.Is(resp.Result().Err, fsm.ErrNotActive) {
		t.Fatalf("refusal: %+v, %v", resp, err)
	}

	if idx, err := c.ReadIndex(ctx, addr); err != nil || idx != 42 {
		t.Fatalf("read index %d, %v", idx, err)
	}
	inv, err := c.Inventory(ctx, addr)
	if err != nil || inv.Host.ID != "h1" || len(inv.Devices) != 1 {
		t.Fatalf("inventory %+v, %v", inv, err)
	}
	st, err := c.Status(ctx, addr)
	if err != nil || !st.HasState || st.Leader != "s2" {
		t.Fatalf("status %+v, %v", st, err)
	}
	if err := c.Restore(ctx, addr, strings.NewReader("snapshot bytes")); err != nil || string(node.restored) != "snapshot bytes" {
		t.Fatalf("restore: %v, got %q", err, node.restored)
	}
}

func TestRPCErrors(t *testing.T) {
	noLeader := &fsm.Error{Code: "no_leader", Message: "no cluster leader"}
	node := &fakeNode{}
	addr, c := serve(t, node)
	ctx := context.Background()

	tests := []struct {
		name string
		call func() error
		want func(error) bool
	}{
		{"typed error keeps its code", func() error {
			node.applyErr = noLeader
			defer func() { node.applyErr = nil }()
			data, _ := fsm.Encode(&fsm.Tick{})
			_, err := c.Apply(ctx, addr, ApplyRequest{Command: data})
			return err
		}, func(err error) bool { return errors.Is(err, noLeader) }},
		{"unknown command type is refused, not applied", func() error {
			_, err := c.Apply(ctx, addr, ApplyRequest{Command: []byte{200, '{', '}'}})
			return err
		}, func(err error) bool { return errors.Is(err, fsm.ErrUnknownCommand) }},
		{"invalid argument", func() error { return c.RemovePeer(ctx, addr, "") },
			func(err error) bool { return errors.Is(err, fsm.ErrInvalid) }},
		{"untyped error becomes internal", func() error { return c.RemovePeer(ctx, addr, "s9") },
			func(err error) bool {
				var e *fsm.Error
				return errors.As(err, &e) && e.Code == "internal" && strings.Contains(e.Message, "disk on fire")
			}},
		{"nobody listening", func() error {
			ln, _ := net.Listen("tcp", "127.0.0.1:0")
			dead := ln.Addr().String()
			ln.Close()
			_, err := c.ReadIndex(ctx, dead)
			return err
		}, func(err error) bool { return errors.Is(err, ErrUnreachable) }},
		{"context ends", func() error {
			cctx, cancel := context.WithCancel(ctx)
			cancel()
			_, err := c.ReadIndex(cctx, addr)
			return err
		}, func(err error) bool { return errors.Is(err, ErrUnreachable) && errors.Is(err, context.Canceled) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); !tt.want(err) {
				t.Fatalf("error %v", err)
			}
		})
	}
}

func TestRPCRejectsBadBodies(t *testing.T) {
	addr, _ := serve(t, &fakeNode{})
	tests := []struct {
		name, path, body string
		want             int
	}{
		{"unknown field", RPCApplyPath, `{"command":"BQ==","extra":1}`, http.StatusBadRequest},
		{"not json", RPCRemovePeerPath, `{`, http.StatusBadRequest},
		{"too large", RPCApplyPath, `{"command":"` + strings.Repeat("A", MaxRPCBody) + `"}`, http.StatusBadRequest},
		{"wrong method", RPCInventoryPath, `{}`, http.StatusMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := http.Post("http://"+addr+tt.path, "application/json", bytes.NewReader([]byte(tt.body)))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.want)
			}
		})
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestInventoryHashNoticesChanges(t *testing.T) {
	a := InventoryResponse{Host: fsm.HostSpec{ID: "h"}, Devices: []fsm.DeviceSpec{{ID: "d1", Type: fsm.GPU}}}
	b := a
	b.Devices = []fsm.DeviceSpec{{ID: "d1", Type: fsm.GPU, Labels: map[string]string{"x": "y"}}}
	if InventoryHash(a) != InventoryHash(a) || InventoryHash(a) == InventoryHash(b) {
		t.Fatal("hash is not a function of the inventory")
	}
	if len(InventoryHash(a)) > 32 {
		t.Fatal("hash too long for gossip metadata")
	}
}
