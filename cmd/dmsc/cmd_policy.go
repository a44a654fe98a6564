package main

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/client/wire"
)

// policyGetCommand is `dmsc policy get`.
type policyGetCommand struct{ apiCommand }

func (c *policyGetCommand) Synopsis() string { return "Show the placement policies" }

func (c *policyGetCommand) Help() string {
	return helpText(`
Usage: dmsc policy get [options]

  Shows the policy of every device type and the pools' overrides.`, "")
}

func (c *policyGetCommand) Run(args []string) int {
	fs := c.flags("policy get")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		p, _, err := cl.Policies(ctx, nil)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(p)
			return nil
		}
		c.output(formatPolicies(p))
		return nil
	})
}

// formatPolicies prints the policies by type, then the pool overrides.
func formatPolicies(p *client.Policies) string {
	gap := func(pc client.PolicyConfig) string {
		if pc.Policy != client.PriorityBased {
			return "-"
		}
		if pc.PreemptionGap <= 0 {
			return fmt.Sprint(wire.DefaultPreemptionGap)
		}
		return fmt.Sprint(pc.PreemptionGap)
	}
	var rows [][]string
	for _, t := range wire.DeviceTypes {
		if pc, ok := p.Types[t]; ok {
			rows = append(rows, []string{string(t), string(pc.Policy), gap(pc)})
		}
	}
	out := table([]string{"TYPE", "POLICY", "PREEMPTION GAP"}, rows)
	if len(p.Pools) > 0 {
		names := make([]string, 0, len(p.Pools))
		for n := range p.Pools {
			names = append(names, n)
		}
		sort.Strings(names)
		rows = rows[:0]
		for _, n := range names {
			rows = append(rows, []string{n, string(p.Pools[n].Policy), gap(p.Pools[n])})
		}
		out += "\n" + table([]string{"POOL", "POLICY", "PREEMPTION GAP"}, rows)
	}
	return out
}

// policySetCommand is `dmsc policy set`.
type policySetCommand struct{ apiCommand }

func (c *policySetCommand) Synopsis() string { return "Set a device type's or a pool's policy" }

func (c *policySetCommand) Help() string {
	policies := make([]string, len(wire.KnownPolicies))
	for i, p := range wire.KnownPolicies {
		policies[i] = string(p)
	}
	return helpText(`
Usage: dmsc policy set -type <type> -policy <policy> [-gap N]
       dmsc policy set -pool <pool> -policy <policy> [-gap N]

  Sets the placement policy of a device type, or a pool's override (which
  beats the type's policy for requests in that pool; an empty -policy
  removes it). Waiting requests are re-examined at once.

      dmsc policy set -type GPU -policy FragmentationAware
      dmsc policy set -pool batch -policy PriorityBased -gap 20`, `
-type=<type>
      The device type.

  -pool=<pool>
      The pool whose override to set, instead of a type.

  -policy=<policy>
      One of `+strings.Join(policies, ", ")+`.

  -gap=<n>
      PriorityBased: how much lower a victim's priority must be to be
      preempted. Default 10.`)
}

func (c *policySetCommand) Run(args []string) int {
	fs := c.flags("policy set")
	var typ, pool, policy string
	var gap int
	fs.StringVar(&typ, "type", "", "")
	fs.StringVar(&pool, "pool", "", "")
	fs.StringVar(&policy, "policy", "", "")
	fs.IntVar(&gap, "gap", 0, "")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	if (typ == "") == (pool == "") {
		return c.usageError("policy set", "dmsc policy set needs one of -type or -pool")
	}
	if policy == "" && pool == "" {
		return c.usageError("policy set", "dmsc policy set -type needs -policy")
	}
	pc := client.PolicyConfig{Policy: policyName(policy), PreemptionGap: gap}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		var (
			p   *client.Policies
			err error
		)
		if pool != "" {
			p, _, err = cl.SetPoolPolicy(ctx, pool, pc)
		} else {
			p, _, err = cl.SetPolicy(ctx, deviceType(typ), pc)
		}
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(p)
			return nil
		}
		c.output(formatPolicies(p))
		return nil
	})
}

// statsCommand is `dmsc stats`.
type statsCommand struct{ apiCommand }

func (c *statsCommand) Synopsis() string { return "Show allocation statistics by device type and pool" }

func (c *statsCommand) Help() string {
	return helpText(`
Usage: dmsc stats [options]

  Shows, for each device type (all pools together, "*") and each pool:
  the policy in force, devices in use, utilisation and fragmentation,
  requests and their outcomes, and queue wait and allocation duration.
  Types without devices or requests are left out of the table (not of
  -json).`, `
-type=<type>
      Only this device type.

  -pool=<pool>
      Only this pool ("*": the per-type totals).

  -namespaces
      Per namespace instead (every namespace the token may read, or
      -namespace alone), for each type: weight and entitlement against
      the share of the devices held now and of the recent usage (fair
      share on), the quota's max count and what is borrowed past it,
      queue wait p50/p95, and refusals by reason (no capacity, quota,
      timed out).`)
}

func (c *statsCommand) Run(args []string) int {
	fs := c.flags("stats")
	var typ string
	var f client.StatsFilter
	fs.StringVar(&typ, "type", "", "")
	fs.StringVar(&f.Pool, "pool", "", "")
	var byNamespace bool
	fs.BoolVar(&byNamespace, "namespaces", false, "")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	if typ != "" {
		f.Type = deviceType(typ)
	}
	if byNamespace {
		if f.Pool != "" {
			return c.usageError("stats", "-namespaces counts every pool together: no -pool")
		}
		return c.namespaceStats(f.Type)
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		stats, _, err := cl.Stats(ctx, &f, nil)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(stats)
			return nil
		}
		// A type in one pool has the same figures in its "*" row.
		pools := map[client.DeviceType]int{}
		for _, s := range stats {
			if s.Pool != wire.AllPools {
				pools[s.Type]++
			}
		}
		var rows [][]string
		for _, s := range stats {
			if s.Devices.Total == 0 && s.Counts.Total == 0 && f.Type == "" {
				continue
			}
			if s.Pool == wire.AllPools && pools[s.Type] == 1 && f.Pool == "" {
				continue
			}
			pool := s.Pool
			if pool == "" {
				pool = "(none)" // refused requests that named no pool
			}
			rows = append(rows, []string{
				string(s.Type), pool, string(s.Policy.Policy),
				fmt.Sprintf("%d/%d", s.Devices.InUse, s.Devices.Total),
				formatPct(s.Utilisation), formatPct(s.Fragmentation),
				fmt.Sprint(s.Counts.Total), fmt.Sprint(s.Counts.Active), fmt.Sprint(s.Counts.Pending),
				fmt.Sprint(s.Counts.Failed + s.Counts.TimedOut), formatPct(s.SuccessRate),
				formatSeconds(s.QueueWait.P95), formatSeconds(s.Duration.P50),
			})
		}
		if len(rows) == 0 {
			c.ui.Output("No devices and no requests yet")
			return nil
		}
		c.output(table([]string{"TYPE", "POOL", "POLICY", "IN USE", "UTIL", "FRAG", "REQUESTS", "ACTIVE", "PENDING",
			"REFUSED", "SUCCESS", "WAIT P95", "DURATION P50"}, rows))
		return nil
	})
}

// namespaceStats prints `dmsc stats -namespaces`.
func (c *statsCommand) namespaceStats(typ client.DeviceType) int {
	return c.run(func(ctx context.Context, cl *client.Client) error {
		stats, _, err := cl.NamespaceStats(ctx, typ, orDefault(c.namespace, "*"), nil)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(stats)
			return nil
		}
		if len(stats) == 0 {
			c.ui.Output("No namespaces with requests or quotas yet")
			return nil
		}
		rows := make([][]string, 0, len(stats))
		for _, n := range stats {
			quota := "-"
			if n.MaxCount != nil {
				quota = fmt.Sprint(*n.MaxCount)
				if n.Borrowing > 0 {
					quota += fmt.Sprintf(" (+%d borrowed)", n.Borrowing)
				}
			}
			rows = append(rows, []string{n.Namespace, string(n.Type), strconv.FormatFloat(n.Weight, 'g', -1, 64),
				fmt.Sprintf("%.1f%%", n.EntitlementPct), fmt.Sprint(n.Held), fmt.Sprintf("%.1f%%", n.SharePct), fmt.Sprintf("%.1f%%", n.RecentSharePct),
				quota, fmt.Sprint(n.Counts.Total), formatSeconds(n.QueueWait.P50), formatSeconds(n.QueueWait.P95),
				fmt.Sprint(n.Refusals["no_capacity"]), fmt.Sprint(n.Refusals["quota"]), fmt.Sprint(n.Refusals["timed_out"])})
		}
		c.output(table([]string{"NAMESPACE", "TYPE", "WEIGHT", "ENTITLED", "HELD", "SHARE", "RECENT", "QUOTA", "REQUESTS",
			"WAIT P50", "WAIT P95", "NO CAPACITY", "OVER QUOTA", "TIMED OUT"}, rows))
		return nil
	})
}

// recommendCommand is `dmsc recommend`.
type recommendCommand struct{ apiCommand }

func (c *recommendCommand) Synopsis() string { return "Show recommendations per device type" }

func (c *recommendCommand) Help() string {
	return helpText(`
Usage: dmsc recommend [options]

  Shows advice drawn from the statistics and the history, most urgent
  first: switch policy, add capacity, rebalance hot hosts, drain unhealthy
  devices, or keep the current policy. Each comes with its evidence and a
  confidence that grows with the samples behind it.`, `
-type=<type>
      Only this device type.`)
}

func (c *recommendCommand) Run(args []string) int {
	fs := c.flags("recommend")
	var typ string
	fs.StringVar(&typ, "type", "", "")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		recs, _, err := cl.Recommendations(ctx, deviceType(typ), nil)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(recs)
			return nil
		}
		if len(recs) == 0 {
			c.ui.Output("No recommendations")
			return nil
		}
		c.output(formatRecommendations(recs))
		return nil
	})
}

// formatRecommendations prints each recommendation as a block: the kind
// and scope, the message, the evidence.
func formatRecommendations(recs []client.Recommendation) string {
	var b strings.Builder
	for i, r := range recs {
		if i > 0 {
			b.WriteString("\n")
		}
		scope := string(r.Type)
		if r.Pool != "" {
			scope += " pool " + r.Pool
		}
		if r.Namespace != "" {
			scope += " namespace " + r.Namespace
		}
		fmt.Fprintf(&b, "[%s] %s: %s (confidence %.2f)\n", r.Priority, scope, r.Kind, r.Confidence)
		fmt.Fprintf(&b, "  %s\n", r.Message)
		if r.Policy != "" {
			fmt.Fprintf(&b, "  Suggested policy: %s\n", r.Policy)
		}
		if len(r.Devices) > 0 {
			fmt.Fprintf(&b, "  Devices: %s\n", strings.Join(r.Devices, ", "))
		}
		if len(r.Evidence) > 0 {
			keys := make([]string, 0, len(r.Evidence))
			for k := range r.Evidence {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for j, k := range keys {
				keys[j] = k + "=" + formatNum(r.Evidence[k])
			}
			fmt.Fprintf(&b, "  Evidence: %s\n", strings.Join(keys, " "))
		}
	}
	return b.String()
}

// policyCommands are the policy, statistics and advice subcommands.
func policyCommands(ui cli.Ui) map[string]cli.CommandFactory {
	base := func() apiCommand { return apiCommand{ui: ui} }
	return map[string]cli.CommandFactory{
		"policy": func() (cli.Command, error) {
			return &parentCommand{ui: ui, name: "policy", synopsis: "Show or set placement policies", subs: []string{"get", "set"}}, nil
		},
		"policy get": func() (cli.Command, error) { return &policyGetCommand{base()}, nil },
		"policy set": func() (cli.Command, error) { return &policySetCommand{base()}, nil },
		"stats":      func() (cli.Command, error) { return &statsCommand{base()}, nil },
		"recommend":  func() (cli.Command, error) { return &recommendCommand{base()}, nil },
	}
}
