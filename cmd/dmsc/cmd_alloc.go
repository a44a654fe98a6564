package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/client"
)

// allocCommand is `dmsc alloc`: ask for devices.
type allocCommand struct{ apiCommand }

func (c *allocCommand) Synopsis() string { return "Allocate devices (and list or inspect allocations)" }

func (c *allocCommand) Help() string {
	return helpText(`
Usage: dmsc alloc -type <type> [options]

  Asks the cluster for devices: -count devices of -type, each with at least
  the given capabilities, all on one host, or with -max-hosts over several
  hosts at once (a gang). Prints the allocation; when nothing fits, prints
  why not (what each filter removed, and for a gang what each host and
  domain could take) and exits 3.

  With -timeout the request may wait in the queue that long; add -wait to
  block until it is placed or refused, else the pending allocation is
  printed at once (watch it with 'dmsc alloc status ID').

      dmsc alloc -type GPU -memory-gb 16
      dmsc alloc -type GPU -count 2 -custom model='A100-SXM4-80GB|H100 80GB HBM3' -timeout 5m -wait
      dmsc alloc -type CPU -amount-compute-units 8 -ttl 1h -label zone=a
      dmsc alloc -type GPU -count 32 -max-hosts 4 -same rack -timeout 1h`, `
-type=<type>
      Device type: CPU, GPU, Memory, Storage, Network, Sensor, Actuator or
      Custom. Required.

  -count=<n>
      Number of devices. Default 1.

  -topology=nvlink
      Take only GPUs linked to one another by NVLink (on each host). Without
      it a claim of several GPUs prefers the best-linked ones, and the CPU
      and memory of the request the GPUs' NUMA node.

  -max-hosts=<k>
      Let the devices span up to k hosts, all placed at once or not at all
      (a gang). Default 1: one host. A waiting gang reserves hosts as they
      free, so smaller requests cannot starve it.

  -min-per-host=<n>
      With -max-hosts: at least n of the devices on each host. Default 1.

  -same=<label>
      With -max-hosts: every host carries this host label with one value
      (rack, zone).

  -memory-gb, -compute-units, -storage-gb, -bandwidth-gbps=<n>
      Minimum capabilities of each device.

  -custom key=value
      A custom capability the device must have; "a|b" accepts either.
      Repeatable.

  -amount-memory-gb, -amount-compute-units, -amount-storage-gb,
  -amount-bandwidth-gbps=<n>
      What to take from each shareable device (default: the whole device).

  -priority=<0..1000>
      Higher is served first from the queue; under PriorityBased it may
      preempt lower priorities.

  -timeout=<duration>
      How long the request may wait for capacity. Default 0: refuse at once.

  -wait
      Block until the request is placed or refused (at most -timeout).

  -ttl=<duration>
      Lease: the allocation expires unless renewed ('dmsc renew') in time.

  -pool=<name>
      Only devices of this pool.

  -label key=value, -prefer key=value, -forbid key=value
      Labels a device must have, should have, or must not have ("*": any
      value). Repeatable.

  -request-id=<id>
      Idempotency key: the same ID never allocates twice. Default: a new
      one.`)
}

func (c *allocCommand) Run(args []string) int {
	fs := c.flags("alloc")
	var f allocFlags
	f.add(fs)
	var wait bool
	fs.BoolVar(&wait, "wait", false, "")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	req, msg := f.request()
	if msg != "" {
		return c.usageError("alloc", "%s", msg)
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		var opts []client.AllocateOption
		if wait {
			opts = append(opts, client.WaitForPlacement())
		}
		a, _, err := cl.Allocate(ctx, req, opts...)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(a)
			return nil
		}
		c.output(formatAllocation(a))
		if a.Status == client.Pending {
			c.ui.Output("\nWaiting in the queue; follow it with 'dmsc alloc status " + a.ID + "'.")
		}
		return nil
	})
}

// allocFlags are the request flags of dmsc alloc and dmsc run.
type allocFlags struct {
	typ, pool, requestID, same, topology                 string
	count, priority, maxHosts, minPerHost                int
	memGB, compute, storageGB, bandwidth                 float64
	amountMem, amountCompute, amountStorage, amountBandw float64
	timeout, ttl                                         time.Duration
	custom, required, preferred, forbidden               kvFlag
}

func (f *allocFlags) add(fs *flag.FlagSet) {
	f.custom, f.required, f.preferred, f.forbidden = kvFlag{}, kvFlag{}, kvFlag{}, kvFlag{}
	fs.StringVar(&f.typ, "type", "", "")
	fs.IntVar(&f.count, "count", 1, "")
	fs.IntVar(&f.maxHosts, "max-hosts", 1, "")
	fs.StringVar(&f.topology, "topology", "", "")
	fs.IntVar(&f.minPerHost, "min-per-host", 0, "")
	fs.StringVar(&f.same, "same", "", "")
	fs.Float64Var(&f.memGB, "memory-gb", 0, "")
	fs.Float64Var(&f.compute, "compute-units", 0, "")
	fs.Float64Var(&f.storageGB, "storage-gb", 0, "")
	fs.Float64Var(&f.bandwidth, "bandwidth-gbps", 0, "")
	fs.Var(f.custom, "custom", "")
	fs.Float64Var(&f.amountMem, "amount-memory-gb", 0, "")
	fs.Float64Var(&f.amountCompute, "amount-compute-units", 0, "")
	fs.Float64Var(&f.amountStorage, "amount-storage-gb", 0, "")
	fs.Float64Var(&f.amountBandw, "amount-bandwidth-gbps", 0, "")
	fs.IntVar(&f.priority, "priority", 0, "")
	fs.DurationVar(&f.timeout, "timeout", 0, "")
	fs.DurationVar(&f.ttl, "ttl", 0, "")
	fs.StringVar(&f.pool, "pool", "", "")
	fs.Var(f.required, "label", "")
	fs.Var(f.preferred, "prefer", "")
	fs.Var(f.forbidden, "forbid", "")
	fs.StringVar(&f.requestID, "request-id", "", "")
}

// request is the request the flags ask for, or why the flags do not
// make one.
func (f *allocFlags) request() (client.AllocateRequest, string) {
	if f.typ == "" {
		return client.AllocateRequest{}, "needs -type (GPU, CPU, Memory, ...)"
	}
	if f.maxHosts <= 1 && (f.minPerHost != 0 || f.same != "") {
		return client.AllocateRequest{}, "-min-per-host and -same go with -max-hosts above 1"
	}
	claim := client.Claim{
		Type: deviceType(f.typ), Count: f.count,
		Capabilities: client.Capabilities{Resources: client.Resources{MemoryGB: f.memGB, ComputeUnits: f.compute, StorageGB: f.storageGB, BandwidthGbps: f.bandwidth}},
		Amount:       client.Resources{MemoryGB: f.amountMem, ComputeUnits: f.amountCompute, StorageGB: f.amountStorage, BandwidthGbps: f.amountBandw},
		Topology:     f.topology,
	}
	if len(f.custom) > 0 {
		claim.Capabilities.Custom = f.custom
	}
	req := client.AllocateRequest{RequestID: f.requestID, Request: client.Request{
		Claims: []client.Claim{claim}, Priority: f.priority, Timeout: client.Duration(f.timeout),
		LeaseTTL: client.Duration(f.ttl), Pool: f.pool,
	}}
	if f.maxHosts > 1 {
		req.MaxHosts, req.MinPerHost, req.Same = f.maxHosts, f.minPerHost, f.same
	}
	if len(f.required) > 0 {
		req.Labels.Required = f.required
	}
	if len(f.preferred) > 0 {
		req.Labels.Preferred = f.preferred
	}
	if len(f.forbidden) > 0 {
		req.Labels.Forbidden = f.forbidden
	}
	return req, ""
}

// claimSummary prints a request's claims: "1 x GPU (memory_gb>=16)".
func claimSummary(r client.Request) string {
	parts := make([]string, len(r.Claims))
	for i, cl := range r.Claims {
		s := fmt.Sprintf("%d x %s", cl.Count, cl.Type)
		var needs []string
		if n := formatResources(cl.Capabilities.Resources, ">="); n != "" {
			needs = append(needs, n)
		}
		if len(cl.Capabilities.Custom) > 0 {
			needs = append(needs, formatMap(cl.Capabilities.Custom))
		}
		if a := formatResources(cl.Amount, "="); a != "" {
			needs = append(needs, "take "+a)
		}
		if cl.Topology != "" {
			needs = append(needs, "linked by "+cl.Topology)
		}
		if len(needs) > 0 {
			s += " (" + strings.Join(needs, "; ") + ")"
		}
		parts[i] = s
	}
	out := strings.Join(parts, " + ")
	if r.MaxHosts > 1 {
		out += fmt.Sprintf(" over <= %d hosts", r.MaxHosts)
		if r.MinPerHost > 1 {
			out += fmt.Sprintf(", >= %d each", r.MinPerHost)
		}
		if r.Same != "" {
			out += ", one " + r.Same
		}
	}
	return out
}

// deviceList prints the devices an allocation holds.
func deviceList(a *client.Allocation) string {
	if len(a.Devices) == 0 {
		return "-"
	}
	ids := make([]string, len(a.Devices))
	for i, d := range a.Devices {
		ids[i] = d.DeviceID
	}
	return strings.Join(ids, ",")
}

// formatAllocation prints an allocation in detail.
func formatAllocation(a *client.Allocation) string {
	pairs := [][2]string{
		{"ID", a.ID},
		{"Request ID", orDash(a.RequestID)},
		{"Status", allocStatusText(a)},
		{"Request", claimSummary(a.Request)},
	}
	if a.Request.Priority != 0 {
		pairs = append(pairs, [2]string{"Priority", fmt.Sprint(a.Request.Priority)})
	}
	if a.Request.Pool != "" {
		pairs = append(pairs, [2]string{"Pool", a.Request.Pool})
	}
	if l := a.Request.Labels; len(l.Required)+len(l.Preferred)+len(l.Forbidden) > 0 {
		pairs = append(pairs, [2]string{"Labels", fmt.Sprintf("required %s; preferred %s; forbidden %s",
			formatMap(l.Required), formatMap(l.Preferred), formatMap(l.Forbidden))})
	}
	pairs = append(pairs,
		[2]string{"Policy", orDash(string(a.Policy))},
		[2]string{"Host", orDash(a.Host)},
	)
	if len(a.Hosts) > 1 {
		pairs = append(pairs, [2]string{"Hosts", strings.Join(a.Hosts, ",")})
	}
	if len(a.Reserved) > 0 {
		start := "unknown (a device it needs is held without a lease)"
		if !a.ExpectedStart.IsZero() {
			start = formatTime(a.ExpectedStart)
		}
		pairs = append(pairs, [2]string{"Reserved hosts", strings.Join(a.Reserved, ",")}, [2]string{"Expected start", start})
	}
	pairs = append(pairs,
		[2]string{"Devices", deviceList(a)},
		[2]string{"Requested", formatTime(a.RequestedAt)},
	)
	for _, p := range []struct {
		name string
		t    time.Time
	}{{"Allocated", a.AllocatedAt}, {"Deadline", a.Deadline}, {"Lease expires", a.LeaseExpiresAt}, {"Ended", a.EndedAt}} {
		if !p.t.IsZero() {
			pairs = append(pairs, [2]string{p.name, formatTime(p.t)})
		}
	}
	if a.Reason != "" {
		pairs = append(pairs, [2]string{"Reason", a.Reason})
	}
	if a.PreemptedBy != "" {
		pairs = append(pairs, [2]string{"Preempted by", a.PreemptedBy})
	}
	if len(a.Preempted) > 0 {
		pairs = append(pairs, [2]string{"Preempted", strings.Join(a.Preempted, ",")})
	}
	if p := a.Preempting; p != nil {
		pairs = append(pairs, [2]string{"Reclaimed by", p.By}, [2]string{"Preempted at", formatTime(p.Deadline)})
	}
	out := keyValues(pairs)
	if len(a.Devices) > 0 {
		rows := make([][]string, len(a.Devices))
		for i, d := range a.Devices {
			amount := formatResources(d.Amount, "=")
			if amount == "" {
				amount = "whole device"
			}
			rows[i] = []string{d.DeviceID, fmt.Sprint(d.Claim), amount}
		}
		out += "\n" + table([]string{"DEVICE", "CLAIM", "TAKEN"}, rows)
	}
	if a.WhyNot != nil && (a.Status == client.Pending || a.Status == client.TimedOut || a.Status == client.Failed) {
		out += "\n" + formatWhyNot(a.WhyNot)
	}
	return out
}

// deviceColumn shortens a long device list for a table.
func deviceColumn(a *client.Allocation) string {
	if len(a.Devices) > 2 {
		return fmt.Sprintf("%s,... (%d)", a.Devices[0].DeviceID, len(a.Devices))
	}
	return deviceList(a)
}

// allocRows prints allocations as table rows.
func allocRows(list []client.Allocation, ended bool) [][]string {
	rows := make([][]string, len(list))
	for i := range list {
		a := &list[i]
		row := []string{a.ID, string(a.Status), claimSummary(a.Request), orDash(a.Host), deviceColumn(a),
			fmt.Sprint(a.Request.Priority), formatTime(a.RequestedAt)}
		if ended {
			row = append(row, formatTime(a.EndedAt), orDash(a.Reason))
		}
		rows[i] = row
	}
	return rows
}

var allocHeader = []string{"ID", "STATUS", "REQUEST", "HOST", "DEVICES", "PRIORITY", "REQUESTED"}

// allocFilterFlags returns a flag set with the list filters; finish
// fills the filter once the flags are parsed.
func allocFilterFlags(c *apiCommand, name string) (*flag.FlagSet, *client.AllocationFilter, func()) {
	fs := c.flags(name)
	f := &client.AllocationFilter{}
	var status, typ string
	fs.StringVar(&status, "status", "", "")
	fs.StringVar(&typ, "type", "", "")
	fs.StringVar(&f.Pool, "pool", "", "")
	fs.StringVar(&f.Host, "host", "", "")
	finish := func() {
		if typ != "" {
			f.Type = deviceType(typ)
		}
		for _, s := range strings.Split(status, ",") {
			if s = strings.TrimSpace(s); s != "" {
				f.Statuses = append(f.Statuses, client.AllocStatus(strings.ToLower(s)))
			}
		}
	}
	return fs, f, finish
}

// allocListCommand is `dmsc alloc list`.
type allocListCommand struct{ apiCommand }

func (c *allocListCommand) Synopsis() string { return "List live allocations" }

func (c *allocListCommand) Help() string {
	return helpText(`
Usage: dmsc alloc list [options]

  Lists pending and active allocations, oldest first (with -history, the
  ended ones the history keeps too).`, `
-status=<s1,s2>
      Only these statuses: pending, active, released, expired, timed_out,
      preempted, lost, failed, cancelled.

  -type=<type>, -pool=<pool>, -host=<host>
      Only allocations of this device type, pool or host.

  -history
      Add the ended allocations the history keeps.`)
}

func (c *allocListCommand) Run(args []string) int {
	fs, f, finish := allocFilterFlags(&c.apiCommand, "alloc list")
	fs.BoolVar(&f.History, "history", false, "")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	finish()
	return c.run(func(ctx context.Context, cl *client.Client) error {
		list, err := allPages(ctx, func(next string) (*client.AllocationList, error) {
			f.Next = next
			f.Limit = 1000
			l, _, err := cl.Allocations(ctx, f, nil)
			return l, err
		}, 0)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(list)
			return nil
		}
		if len(list) == 0 {
			c.ui.Output("No allocations")
			return nil
		}
		c.output(table(allocHeader, allocRows(list, false)))
		return nil
	})
}

// allPages reads pages until the last, or until limit allocations (0: no
// limit).
func allPages(ctx context.Context, page func(next string) (*client.AllocationList, error), limit int) ([]client.Allocation, error) {
	out := []client.Allocation{}
	next := ""
	for {
		l, err := page(next)
		if err != nil {
			return nil, err
		}
		out = append(out, l.Allocations...)
		if limit > 0 && len(out) >= limit {
			return out[:limit], nil
		}
		if l.Next == "" || ctx.Err() != nil {
			return out, ctx.Err()
		}
		next = l.Next
	}
}

// allocStatusCommand is `dmsc alloc status ID`.
type allocStatusCommand struct{ apiCommand }

func (c *allocStatusCommand) Synopsis() string { return "Show one allocation" }

func (c *allocStatusCommand) Help() string {
	return helpText(`
Usage: dmsc alloc status [options] <allocation-id>

  Shows an allocation, live or from the history: its request, devices,
  times, and for a pending or refused one why it is not placed.`, `
  -watch
      Then follow it live (the event stream): one line per change, until
      it ends (released, expired, timed out, ...) or Ctrl-C.`)
}

func (c *allocStatusCommand) Run(args []string) int {
	fs := c.flags("alloc status")
	watch := fs.Bool("watch", false, "")
	pos, ok := c.parse(fs, args, "<allocation-id>")
	if !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		a, meta, err := cl.Allocation(ctx, pos[0], nil)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(a)
		} else {
			c.output(formatAllocation(a))
		}
		if !*watch || allocEnded(a.Status) {
			return nil
		}
		if !c.json {
			c.ui.Output("")
		}
		return c.watchAllocation(ctx, cl, a, meta.Index)
	})
}

// allocWriteCommand is `dmsc release ID`, `dmsc alloc cancel ID` and
// `dmsc renew ID`.
type allocWriteCommand struct {
	apiCommand
	verb string // release, cancel, renew
}

func (c *allocWriteCommand) name() string {
	if c.verb == "cancel" {
		return "alloc cancel"
	}
	return c.verb
}

func (c *allocWriteCommand) Synopsis() string {
	switch c.verb {
	case "release":
		return "Release an active allocation"
	case "cancel":
		return "Cancel a pending allocation"
	}
	return "Renew an allocation's lease"
}

func (c *allocWriteCommand) Help() string {
	switch c.verb {
	case "release":
		return helpText(`
Usage: dmsc release [options] <allocation-id>

  Gives back an active allocation's devices. Exits 5 when the allocation
  is pending (cancel it with 'dmsc alloc cancel') or has ended.`, "")
	case "cancel":
		return helpText(`
Usage: dmsc alloc cancel [options] <allocation-id>

  Withdraws a pending request from the queue. Exits 5 when it is active
  (release it) or has ended.`, "")
	}
	return helpText(`
Usage: dmsc renew [options] <allocation-id>

  Extends an active allocation's lease from now.`, `
-ttl=<duration>
      The new lease. Default: the request's lease TTL.`)
}

func (c *allocWriteCommand) Run(args []string) int {
	fs := c.flags(c.name())
	var ttl time.Duration
	if c.verb == "renew" {
		fs.DurationVar(&ttl, "ttl", 0, "")
	}
	pos, ok := c.parse(fs, args, "<allocation-id>")
	if !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		var (
			a   *client.Allocation
			err error
		)
		switch c.verb {
		case "release":
			a, _, err = cl.Release(ctx, pos[0])
		case "cancel":
			a, _, err = cl.Cancel(ctx, pos[0])
		default:
			a, _, err = cl.Renew(ctx, pos[0], ttl)
		}
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(a)
			return nil
		}
		switch c.verb {
		case "renew":
			c.ui.Output(fmt.Sprintf("Renewed allocation %s: the lease expires %s", a.ID, formatTime(a.LeaseExpiresAt)))
		default:
			c.ui.Output(fmt.Sprintf("Allocation %s is %s (devices %s)", a.ID, a.Status, deviceList(a)))
		}
		return nil
	})
}

// historyCommand is `dmsc history`.
type historyCommand struct{ apiCommand }

func (c *historyCommand) Synopsis() string { return "List ended allocations" }

func (c *historyCommand) Help() string {
	return helpText(`
Usage: dmsc history [options]

  Lists the ended allocations the history keeps, the latest requests
  first.`, `
-status=<s1,s2>, -type=<type>, -pool=<pool>, -host=<host>
      Filters, as for 'dmsc alloc list'.

  -limit=<n>
      At most this many. Default 50; 0 for all.`)
}

func (c *historyCommand) Run(args []string) int {
	fs, f, finish := allocFilterFlags(&c.apiCommand, "history")
	var limit int
	fs.IntVar(&limit, "limit", 50, "")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	finish()
	if limit < 0 {
		return c.usageError("history", "-limit must be 0 or more")
	}
	f.Reverse = true
	return c.run(func(ctx context.Context, cl *client.Client) error {
		list, err := allPages(ctx, func(next string) (*client.AllocationList, error) {
			f.Next = next
			f.Limit = 1000
			if limit > 0 {
				f.Limit = min(limit, 1000)
			}
			l, _, err := cl.History(ctx, f, nil)
			return l, err
		}, limit)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(list)
			return nil
		}
		if len(list) == 0 {
			c.ui.Output("No ended allocations")
			return nil
		}
		c.output(table(append(append([]string{}, allocHeader...), "ENDED", "REASON"), allocRows(list, true)))
		return nil
	})
}

// allocCommands are the allocation subcommands.
func allocCommands(ui cli.Ui) map[string]cli.CommandFactory {
	base := func() apiCommand { return apiCommand{ui: ui} }
	return map[string]cli.CommandFactory{
		"alloc":        func() (cli.Command, error) { return &allocCommand{base()}, nil },
		"alloc list":   func() (cli.Command, error) { return &allocListCommand{base()}, nil },
		"alloc status": func() (cli.Command, error) { return &allocStatusCommand{base()}, nil },
		"alloc cancel": func() (cli.Command, error) { return &allocWriteCommand{base(), "cancel"}, nil },
		"release":      func() (cli.Command, error) { return &allocWriteCommand{base(), "release"}, nil },
		"renew":        func() (cli.Command, error) { return &allocWriteCommand{base(), "renew"}, nil },
		"history":      func() (cli.Command, error) { return &historyCommand{base()}, nil },
	}
}

// allocStatusText is an allocation's status, "active (preempting)" while
// its borrowed devices are reclaimed.
func allocStatusText(a *client.Allocation) string {
	if a.Preempting != nil {
		return string(a.Status) + " (preempting)"
	}
	return string(a.Status)
}
