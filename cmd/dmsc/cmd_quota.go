package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/dmsc/dmsc/client"
	"github.com/hashicorp/cli"
)

// quotaApplyCommand is `dmsc quota apply`.
type quotaApplyCommand struct{ apiCommand }

func (c *quotaApplyCommand) Synopsis() string { return "Set a limit of a namespace's quota" }

func (c *quotaApplyCommand) Help() string {
	return helpText(`
Usage: dmsc quota apply -namespace <namespace> -type <type> [options]

  Sets the limit on one device type (in one pool with -pool, else in all
  pools together) of a namespace's quota, keeping its other limits. The
  namespace's active allocations may then hold at most -max-count devices
  of the type (whole or in part) and at most each -max-* amount; a
  request that would pass a limit is refused, or waits in the queue with
  its timeout, and its why-not names the limit. A limit lowered below
  what the namespace holds ends nothing, but nothing more is placed until
  its use is below.`, `
  -type=<type>
    The device type the limit is on (GPU, CPU, Memory, Storage, Network).

  -pool=<pool>
    Limit the type in this pool only. Default: every pool together.

  -max-count=<n>
    The most devices of the type the namespace may hold (0: none).
    Default: no bound on the count.

  -max-memory-gb=<gb>, -max-compute-units=<n>, -max-storage-gb=<gb>,
  -max-bandwidth-gbps=<gbps>
    The most of each amount the namespace may hold (a whole exclusive
    device counts its capacity). Default: no bound.`)
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
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	ns := c.namespace
	switch {
	case ns == "" || ns == "*":
		return c.usageError("quota apply", "-namespace is required (one namespace)")
	case typ == "":
		return c.usageError("quota apply", "-type is required")
	case count < -1:
		return c.usageError("quota apply", "-max-count must be 0 or more")
	}
	lim.Type, lim.Pool = client.DeviceType(typ), pool
	if count >= 0 {
		lim.MaxCount = client.MaxCount(count)
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		// The other limits are kept: read the quota, change one limit.
		have, _, err := cl.Quotas(ctx, ns, nil)
		if err != nil {
			return err
		}
		var limits []client.QuotaLimit
		for _, q := range have {
			for _, u := range q.Limits {
				if u.Limit.Type != lim.Type || u.Limit.Pool != lim.Pool {
					limits = append(limits, u.Limit)
				}
			}
		}
		q, _, err := cl.SetQuota(ctx, ns, append(limits, lim))
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

// quotaTable is a row per limit: what is held against the bound.
func quotaTable(qs []client.Quota) string {
	var rows [][]string
	for _, q := range qs {
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
			rows = append(rows, []string{q.Namespace, string(u.Limit.Type), orDefault(u.Limit.Pool, "*"), count, orDash(strings.Join(amounts, ", "))})
		}
	}
	slices.SortStableFunc(rows, func(a, b []string) int { return strings.Compare(a[0], b[0]) })
	return table([]string{"NAMESPACE", "TYPE", "POOL", "DEVICES", "AMOUNTS"}, rows)
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
	}
}
