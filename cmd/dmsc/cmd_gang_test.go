package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/client/wire"
)

// TestCLIGang places a gang over two hosts from the command line, shows
// its hosts, and explains a refused gang per host and per domain; a gang
// that waits shows its reserved hosts.
func TestCLIGang(t *testing.T) {
	addr := apiNode(t) // h1: g1, g2 in zone a
	cl, err := client.New(client.Config{Addresses: []string{addr}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, h := range []struct{ id, zone string }{{"h2", "a"}, {"h3", "b"}} {
		var devs []client.DeviceSpec
		for i := range 2 {
			devs = append(devs, client.DeviceSpec{ID: fmt.Sprintf("%s-g%d", h.id, i), Type: client.GPU, Name: "A100",
				Capabilities: client.Capabilities{Resources: client.Resources{MemoryGB: 80}}})
		}
		if _, _, err := cl.RegisterHost(ctx, h.id, client.RegisterHostRequest{Labels: map[string]string{"zone": h.zone}, Devices: devs}); err != nil {
			t.Fatal(err)
		}
	}
	var a wire.Allocation
	jsonOut(t, &a, "alloc", "-type", "GPU", "-count", "4", "-max-hosts", "2", "-same", "zone")
	if len(a.Hosts) != 2 || a.Hosts[0] != "h1" || a.Hosts[1] != "h2" || len(a.Devices) != 4 {
		t.Fatalf("gang on %v with %d devices", a.Hosts, len(a.Devices))
	}
	for _, tc := range []cliCase{
		{args: []string{"alloc", "status", a.ID}, out: []string{"Hosts", "h1,h2", "over <= 2 hosts, one zone"}},
		{args: []string{"alloc", "-type", "GPU", "-count", "3", "-max-hosts", "3", "-same", "zone"}, code: exitCapacity,
			errOut: []string{"Gang: 3 devices over at most 3 hosts", "h3", "By zone"}},
		{args: []string{"alloc", "-type", "GPU", "-count", "2", "-same", "zone"}, code: exitUsage},
		{args: []string{"alloc", "-type", "GPU", "-count", "3", "-max-hosts", "2", "-timeout", "1m"},
			out: []string{"pending", "Reserved hosts", "Expected start", "unknown"}},
	} {
		tc.check(t)
	}
}
