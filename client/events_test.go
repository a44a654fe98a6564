package client_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client"
)

// nextEvents reads batches until n events have come.
func nextEvents(t *testing.T, ch <-chan client.EventBatch, n int) []client.Event {
	t.Helper()
	var out []client.Event
	timeout := time.After(10 * time.Second)
	for len(out) < n {
		select {
		case b, ok := <-ch:
			if !ok {
				t.Fatalf("stream closed after %d events", len(out))
			}
			if b.Err != nil {
				t.Fatalf("stream ended after %d events: %v", len(out), b.Err)
			}
			out = append(out, b.Events...)
		case <-timeout:
			t.Fatalf("%d events of %d in 10 s", len(out), n)
		}
	}
	return out
}

// The SDK's stream sees an allocation's life, and goes on from where it
// was on another node when the node that served it stops.
func TestEventsOnNode(t *testing.T) {
	lc := localCluster(t, 3)
	addrs := lc.Addresses()
	c := newClient(t, client.Config{Addresses: addrs})
	ctx := ctxT(t)
	if _, _, err := c.RegisterHost(ctx, "h1", client.RegisterHostRequest{Devices: []client.DeviceSpec{gpuSpec("g1", 80), gpuSpec("g2", 80)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Events(ctx, []string{"Bogus"}, 0); !errors.Is(err, client.ErrBadRequest) {
		t.Fatalf("unknown topic: %v", err)
	}
	// A follower serves the stream (a client starts with its first
	// address); the client knows the other two too.
	leader := lc.Leader()
	var order []string
	for _, n := range lc.Servers() {
		if n != leader {
			order = append(order, "http://"+n.Self().HTTPAddr)
		}
	}
	order = append(order, "http://"+leader.Self().HTTPAddr)
	watcher := newClient(t, client.Config{Addresses: order})
	ch, err := watcher.Events(ctx, []string{client.TopicAllocation}, 0)
	if err != nil {
		t.Fatal(err)
	}
	a, _, err := c.Allocate(ctx, gpuRequest)
	if err != nil {
		t.Fatal(err)
	}
	evs := nextEvents(t, ch, 2)
	var placed client.Allocation
	if evs[0].Type != "created" || evs[1].Type != "placed" || evs[1].Key != a.ID ||
		json.Unmarshal(evs[1].Payload, &placed) != nil || placed.Status != client.Active {
		t.Fatalf("events %+v", evs)
	}

	// The followers stop in turn, the one serving the stream first; the
	// stream resumes on another node each time without losing or
	// repeating an event.
	for _, n := range lc.Servers() {
		if n == leader {
			continue
		}
		b, _, err := c.Allocate(ctx, gpuRequest)
		if err != nil {
			t.Fatal(err)
		}
		if err := lc.Stop(ctx, n.Self().ID); err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Release(ctx, b.ID); err != nil {
			t.Fatal(err)
		}
		evs := nextEvents(t, ch, 3)
		if evs[0].Key != b.ID || evs[0].Type != "created" || evs[1].Type != "placed" || evs[2].Type != "released" {
			t.Fatalf("after %s stopped: %+v", n.Self().ID, evs)
		}
		if _, err := lc.Restart(ctx, n.Self().ID); err != nil {
			t.Fatal(err)
		}
	}
}
