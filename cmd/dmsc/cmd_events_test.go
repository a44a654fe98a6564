package main

import (
	"strings"
	"testing"

	"github.com/dmsc/dmsc/client/wire"
)

func TestCLIEvents(t *testing.T) {
	apiNode(t)
	// The node's registration of h1, from the start of the log.
	out := cliCase{args: []string{"events", "-index", "1", "-count", "4"}, out: []string{
		"Device      registered  c1  host=h1 type=CPU status=available",
		"Device      registered  g1", "Host        registered  h1  up=true devices=3",
	}}.check(t)
	if n := strings.Count(strings.TrimSpace(out), "\n") + 1; n != 4 {
		t.Fatalf("-count 4 printed %d lines:\n%s", n, out)
	}
	cliCase{args: []string{"events", "-topic", "Bogus"}, code: exitUsage, errOut: []string{"topic"}}.check(t)

	// alloc status -watch follows an allocation until it ends.
	var a wire.Allocation
	jsonOut(t, &a, "alloc", "-type", "gpu", "-memory-gb", "50", "-ttl", "10m")
	type result struct {
		code        int
		out, errOut string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := runCLI(t, "alloc", "status", "-watch", a.ID)
		done <- result{code, out, errOut}
	}()
	cliCase{args: []string{"release", a.ID}, out: []string{"released"}}.check(t)
	r := <-done
	if r.code != 0 || !strings.Contains(r.out, "Status") || !strings.Contains(r.out, "  released") {
		t.Fatalf("alloc status -watch: exit %d\n%s%s", r.code, r.out, r.errOut)
	}
	// Of an ended allocation it prints the status and returns.
	cliCase{args: []string{"alloc", "status", "-watch", a.ID}, out: []string{"released"}}.check(t)
}
