package main

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/fsm"
	"github.com/hashicorp/cli"
)

// quotaApplyCommand is `dmsc quota apply`.
type quotaApplyCommand struct{ apiCommand }

func (c *quotaApplyCommand) Synopsis() string { return "Set a limit of a namespace's quota" }

func (c *quotaApplyCommand) Help() string {
	return helpText(`
Usage: dmsc quota apply -namespace <namespace> [-type <type> [limits]] [options]

  Sets the limit on one device type (in one pool with -pool, else in all
  pools together) of a namespace's quota, keeping its other limits, and
  with -weight, -borrow and -reclaim-grace the namespace's fair-share
  weight and borrowing (what is not given is kept). The namespace's
  active allocations may then hold at most -max-count devices of the type
  (whole or in part) and at most each -max-* amount; a request that would
  pass a limit is refused, or waits in the queue with its timeout, and
  its why-not names the limit. A limit lowered below what the namespace
  holds ends nothing, but nothing more is placed until its use is below.

  A namespace that borrows may go past its max counts on idle capacity.
  When a namespace within its own quota then waits for that capacity,
  the borrowed allocations (lowest priority, most recently started first)
  are marked preempting and end as preempted after the grace.`, `
  -type=<type>
    The device type the limit is on (GPU, CPU, Memory, Storage, Network).
    Needed unless only -weight, -borrow or -reclaim-grace is given.

  -pool=<pool>
    Limit the type in this pool only. Default: every pool together.

  -max-count=<n>
    The most devices of the type the namespace may hold (0: none).
    Default: no bound on the count.

  -max-memory-gb=<gb>, -max-compute-units=<n>, -max-storage-gb=<gb>,
  -max-bandwidth-gbps=<gbps>
    The most of each amount the namespace may hold (a whole exclusive
    device counts its capacity). Default: no bound.

  -weight=<w>
    The namespace's fair-share weight (dmsc queue config -fair-share):
    its entitlement against the other namespaces'. Default 1.

  -borrow
    Let the namespace borrow idle capacity past its max counts
    (-borrow=false: no more).

  -reclaim-grace=<duration>
    How long a borrowed allocation keeps its devices once reclaimed.
    Default 30s.`)
}

func (c *quotaApplyCommand) Run(args []string) int {
	fs := c.flags("quota apply")
	var (
		typ, pool string
		count     int
		lim       client.QuotaLimit
	)
	fs.StringVar(&typ, "type", "", "")
	fs.StringVar(&pool, "pool", "", "")
	fs.IntVar(&count, "max-count", -1, "")
	fs.Float64Var(&lim.MaxAmount.MemoryGB, "max-memory-gb", 0, "")
	fs.Float64Var(&lim.MaxAmount.ComputeUnits, "max-compute-units", 0, "")
	fs.Float64Var(&lim.MaxAmount.StorageGB, "max-storage-gb", 0, "")
	fs.Float64Var(&lim.MaxAmount.BandwidthGbps, "max-bandwidth-gbps", 0, "")
	var (
		weight float64
		borrow bool
		grace  time.Duration
	)
	fs.Float64Var(&weight, "weight", 0, "")
	fs.BoolVar(&borrow, "borrow", false, "")
	fs.DurationVar(&grace, "reclaim-grace", 0, "")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	limitFlags := typ != "" || pool != "" || count != -1 || lim.MaxAmount != (client.Resources{})
	ns := c.namespace
	switch {
	case ns == "" || ns == "*":
		return c.usageError("quota apply", "-namespace is required (one namespace)")
	case typ == "" && (limitFlags || !(set["weight"] || set["borrow"] || set["reclaim-grace"])):
		return c.usageError("quota apply", "-type is required")
	case count < -1:
		return c.usageError("quota apply", "-max-count must be 0 or more")
	case set["weight"] && weight <= 0:
		return c.usageError("quota apply", "-weight must be above 0")
	case grace < 0:
		return c.usageError("quota apply", "-reclaim-grace must be 0 or more")
	}
	lim.Type, lim.Pool = client.DeviceType(typ), pool
	if count >= 0 {
		lim.MaxCount = client.MaxCount(count)
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		// What is not given is kept: read the quota, change what is.
		have, _, err := cl.Quotas(ctx, ns, nil)
		if err != nil {
			return err
		}
		var spec client.QuotaSpec
		for _, q := range have {
			spec.Weight, spec.Borrow, spec.ReclaimGrace = q.Weight, q.Borrow, q.ReclaimGrace
			for _, u := range q.Limits {
				if typ == "" || u.Limit.Type != lim.Type || u.Limit.Pool != lim.Pool {
					spec.Limits = append(spec.Limits, u.Limit)
				}
			}
		}
		if typ != "" {
			spec.Limits = append(spec.Limits, lim)
		}
		if set["weight"] {
			spec.Weight = weight
		}
		if set["borrow"] {
			spec.Borrow = borrow
		}
		if set["reclaim-grace"] {
			spec.ReclaimGrace = client.Duration(grace)
		}
		if !spec.Borrow {
			spec.ReclaimGrace = 0
		}
		q, _, err := cl.SetQuota(ctx, ns, spec)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(q)
			return nil
		}
		c.ui.Output(fmt.Sprintf("Quota of namespace %s:", ns))
		c.output(quotaTable([]client.Quota{*q}))
		return nil
	})
}

// quotaListCommand is `dmsc quota list`.
type quotaListCommand struct{ apiCommand }

func (c *quotaListCommand) Synopsis() string { return "List the namespaces' quotas and their use" }

func (c *quotaListCommand) Help() string {
	return helpText(`
Usage: dmsc quota list [options]

  Lists the quota of every namespace the token may read (of -namespace
  alone when given), each limit with what the namespace holds under it.`, "")
}

func (c *quotaListCommand) Run(args []string) int {
	fs := c.flags("quota list")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	return c.listQuotas(orDefault(c.namespace, "*"), "No quotas")
}

// quotaStatusCommand is `dmsc quota status NAMESPACE`.
type quotaStatusCommand struct{ apiCommand }

func (c *quotaStatusCommand) Synopsis() string { return "Show a namespace's use against its quota" }

func (c *quotaStatusCommand) Help() string {
	return helpText(`
Usage: dmsc quota status [options] <namespace>

  Shows a namespace's quota: each limit, what the namespace holds under it
  and what is left.`, "")
}

func (c *quotaStatusCommand) Run(args []string) int {
	fs := c.flags("quota status")
	pos, ok := c.parse(fs, args, "<namespace>")
	if !ok {
		return exitUsage
	}
	return c.listQuotas(pos[0], "Namespace "+pos[0]+" has no quota")
}

func (c *apiCommand) listQuotas(ns, none string) int {
	return c.run(func(ctx context.Context, cl *client.Client) error {
		qs, _, err := cl.Quotas(ctx, ns, nil)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(qs)
			return nil
		}
		if len(qs) == 0 {
			c.ui.Output(none)
			return nil
		}
		c.output(quotaTable(qs))
		return nil
	})
}

// quotaDeleteCommand is `dmsc quota delete NAMESPACE`.
type quotaDeleteCommand struct{ apiCommand }

func (c *quotaDeleteCommand) Synopsis() string { return "Remove a namespace's quota" }

func (c *quotaDeleteCommand) Help() string {
	return helpText(`
Usage: dmsc quota delete [options] <namespace>

  Removes a namespace's quota: it is bound by capacity alone, and its
  waiting requests are placed if they fit.`, "")
}

func (c *quotaDeleteCommand) Run(args []string) int {
	fs := c.flags("quota delete")
	pos, ok := c.parse(fs, args, "<namespace>")
	if !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		meta, err := cl.DeleteQuota(ctx, pos[0])
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(meta)
			return nil
		}
		c.ui.Output(fmt.Sprintf("Quota of namespace %s removed (index %d)", pos[0], meta.Index))
		return nil
	})
}

// quotaTable is a row per limit: what is held against the bound, with
// the namespace's weight and borrowing.
func quotaTable(qs []client.Quota) string {
	var rows [][]string
	for _, q := range qs {
		borrow := "no"
		if q.Borrow {
			grace := time.Duration(q.ReclaimGrace)
			if grace == 0 {
				grace = fsm.DefaultReclaimGrace
			}
			borrow = "yes, grace " + grace.String()
		}
		weight := strconv.FormatFloat(q.Weight, 'g', -1, 64)
		if len(q.Limits) == 0 {
			rows = append(rows, []string{q.Namespace, "-", "-", "-", "-", weight, borrow})
		}
		for _, u := range q.Limits {
			count := fmt.Sprint(u.Count)
			if u.Limit.MaxCount != nil {
				count = fmt.Sprintf("%d of %d", u.Count, *u.Limit.MaxCount)
			}
			var amounts []string
			for _, a := range []struct {
				name      string
				held, max float64
			}{
				{"memory_gb", u.Amount.MemoryGB, u.Limit.MaxAmount.MemoryGB},
				{"compute_units", u.Amount.ComputeUnits, u.Limit.MaxAmount.ComputeUnits},
				{"storage_gb", u.Amount.StorageGB, u.Limit.MaxAmount.StorageGB},
				{"bandwidth_gbps", u.Amount.BandwidthGbps, u.Limit.MaxAmount.BandwidthGbps},
			} {
				if a.max > 0 {
					amounts = append(amounts, fmt.Sprintf("%s %g of %g", a.name, a.held, a.max))
				}
			}
			rows = append(rows, []string{q.Namespace, string(u.Limit.Type), orDefault(u.Limit.Pool, "*"), count, orDash(strings.Join(amounts, ", ")), weight, borrow})
		}
	}
	slices.SortStableFunc(rows, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	return table([]string{"NAMESPACE", "TYPE", "POOL", "DEVICES", "AMOUNTS", "WEIGHT", "BORROW"}, rows)
}

// orDefault is s, or def when s is empty.
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// quotaCommands are the quota subcommands.
func quotaCommands(ui cli.Ui) map[string]cli.CommandFactory {
	base := func() apiCommand { return apiCommand{ui: ui} }
	return map[string]cli.CommandFactory{
		"quota": func() (cli.Command, error) {
			return &parentCommand{ui: ui, name: "quota", synopsis: "Set, list and inspect namespace quotas",
				subs: []string{"apply", "list", "status", "delete"}}, nil
		},
		"quota apply":  func() (cli.Command, error) { return &quotaApplyCommand{base()}, nil },
		"quota list":   func() (cli.Command, error) { return &quotaListCommand{base()}, nil },
		"quota status": func() (cli.Command, error) { return &quotaStatusCommand{base()}, nil },
		"quota delete": func() (cli.Command, error) { return &quotaDeleteCommand{base()}, nil },
		"queue": func() (cli.Command, error) {
			return &parentCommand{ui: ui, name: "queue", synopsis: "Show or set how the queue is served", subs: []string{"config"}}, nil
		},
		"queue config": func() (cli.Command, error) { return &queueConfigCommand{base()}, nil },
	}
}

// queueConfigCommand is `dmsc queue config`.
type queueConfigCommand struct{ apiCommand }

func (c *queueConfigCommand) Synopsis() string {
	return "Show or set fair share and preemption for the queue"
}

func (c *queueConfigCommand) Help() string {
	return helpText(`
Usage: dmsc queue config [options]

  Without options, shows how the queue is served and each namespace's
  fair-share figures per device type: devices held now, usage decayed by
  the half-life (as devices held on average lately), weight (dmsc quota
  apply -weight) and score, (held + recent) / weight. With options, sets
  what they give and keeps the rest.

  With fair share on, when capacity frees, the waiting namespaces whose
  score is below the share line (what all of them hold now and lately,
  split by weight) are served first, lowest score first; otherwise the
  queue is served by priority, then arrival.`, `
  -fair-share
    Serve the queue by fair share (-fair-share=false: by priority and
    arrival, and the usage is forgotten).

  -half-life=<duration>
    The fair-share usage half-life; turns fair share on. Default 168h
    (7 days).

  -preempt-waiting
    Let a waiting request preempt lower-priority work (under a policy
    that preempts, by its gap) each time the queue is examined, not only
    when it arrives.`)
}

func (c *queueConfigCommand) Run(args []string) int {
	fs := c.flags("queue config")
	var (
		fair, preempt bool
		halfLife      time.Duration
	)
	fs.BoolVar(&fair, "fair-share", false, "")
	fs.DurationVar(&halfLife, "half-life", 0, "")
	fs.BoolVar(&preempt, "preempt-waiting", false, "")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if halfLife < 0 {
		return c.usageError("queue config", "-half-life must be above 0")
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		st, _, err := cl.QueueConfig(ctx, orDefault(c.namespace, "*"), nil)
		if err != nil {
			return err
		}
		if len(set) > 0 {
			cfg := st.QueueConfig
			if set["fair-share"] {
				cfg.FairShare = fair
			}
			if set["half-life"] {
				cfg.HalfLife, cfg.FairShare = client.Duration(halfLife), cfg.FairShare || !set["fair-share"]
			}
			if !cfg.FairShare {
				cfg.HalfLife = 0
			}
			if set["preempt-waiting"] {
				cfg.PreemptWaiting = preempt
			}
			if st, _, err = cl.SetQueueConfig(ctx, cfg); err != nil {
				return err
			}
		}
		if c.json {
			c.printJSON(st)
			return nil
		}
		fairShare := "off"
		if st.FairShare {
			fairShare = "on, half-life " + time.Duration(st.HalfLife).String()
		}
		c.ui.Output(fmt.Sprintf("Fair share:       %s\nPreempt waiting:  %v", fairShare, st.PreemptWaiting))
		if len(st.Usage) > 0 {
			rows := make([][]string, 0, len(st.Usage))
			for _, u := range st.Usage {
				rows = append(rows, []string{u.Namespace, string(u.Type), strconv.FormatFloat(u.Weight, 'g', -1, 64), strconv.Itoa(u.Held),
					strconv.FormatFloat(u.Recent, 'f', 2, 64), strconv.FormatFloat(u.Score, 'f', 3, 64)})
			}
			c.ui.Output("")
			c.output(table([]string{"NAMESPACE", "TYPE", "WEIGHT", "HELD", "RECENT", "SCORE"}, rows))
		}
		return nil
	})
}
