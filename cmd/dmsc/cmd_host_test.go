package main

import (
	"context"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/client/wire"
)

// TestCLIHostDrain drains a host from the command line: new work is
// refused with the why-not at once, the allocation on it ends as drained
// at the deadline (the history says so), host status shows the drain,
// -disable ends it, and forget removes the host.
func TestCLIHostDrain(t *testing.T) {
	addr := apiNode(t)
	var a wire.Allocation
	jsonOut(t, &a, "alloc", "-type", "GPU", "-memory-gb", "50")
	for _, tc := range []cliCase{
		{args: []string{"host", "drain", "-deadline", "2s", "h1"}, out: []string{"Host h1 is drained", "end as drained"}},
		{args: []string{"host", "list"}, out: []string{"up, drained"}},
		{args: []string{"host", "status", "h1"}, out: []string{"State", "up, drained", "Drain deadline", "g1", a.ID}},
		{args: []string{"alloc", "-type", "GPU"}, code: exitCapacity, errOut: []string{"host drained"}},
		{args: []string{"host", "drain", "-disable", "-deadline", "1s", "h1"}, code: exitUsage},
		{args: []string{"host", "drain", "nope"}, code: exitNotFound},
		{args: []string{"host", "drain"}, code: exitUsage},
	} {
		tc.check(t)
	}
	cl, err := client.New(client.Config{Addresses: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for {
		got, _, err := cl.Allocation(ctx, a.ID, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status == client.Drained {
			break
		}
		if got.Status != client.Active {
			t.Fatalf("allocation on the drained host ended %s (%s)", got.Status, got.Reason)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("allocation still %s after the drain deadline", got.Status)
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, tc := range []cliCase{
		{args: []string{"host", "status", "h1"}, out: []string{"reached"}},
		{args: []string{"alloc", "list", "-history"}, out: []string{a.ID, "drained"}},
		{args: []string{"host", "drain", "-disable", "h1"}, out: []string{"no longer drained"}},
		{args: []string{"alloc", "-type", "GPU"}, out: []string{"active"}},
		{args: []string{"host", "forget", "h1"}, out: []string{"Host h1 forgotten"}},
		{args: []string{"host", "list"}, out: []string{"No hosts"}},
	} {
		tc.check(t)
	}
}
