package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/dmsc/dmsc/client"
	"github.com/hashicorp/cli"
)

// hostListCommand is `dmsc host list`.
type hostListCommand struct{ apiCommand }

func (c *hostListCommand) Synopsis() string { return "List hosts" }

func (c *hostListCommand) Help() string {
	return helpText(`
Usage: dmsc host list [options]

  Lists every host, sorted by ID: whether it is up or drained and how
  many devices it has.`, "")
}

func (c *hostListCommand) Run(args []string) int {
	fs := c.flags("host list")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		hosts, _, err := cl.Hosts(ctx, nil)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(hosts)
			return nil
		}
		if len(hosts) == 0 {
			c.ui.Output("No hosts")
			return nil
		}
		rows := make([][]string, len(hosts))
		for i, h := range hosts {
			rows[i] = []string{h.ID, orDash(h.Address), hostState(&h), fmt.Sprint(len(h.Devices)), formatMap(h.Labels), formatTime(h.Since)}
		}
		c.output(table([]string{"ID", "ADDRESS", "STATE", "DEVICES", "LABELS", "SINCE"}, rows))
		return nil
	})
}

// hostState is "up", "down", or either with ", drained".
func hostState(h *client.Host) string {
	state := "down"
	if h.Up {
		state = "up"
	}
	if h.Drain != nil {
		state += ", drained"
	}
	return state
}

// hostStatusCommand is `dmsc host status ID`.
type hostStatusCommand struct{ apiCommand }

func (c *hostStatusCommand) Synopsis() string { return "Show a host, its drain and its devices" }

func (c *hostStatusCommand) Help() string {
	return helpText(`
Usage: dmsc host status [options] <host-id>

  Shows a host: whether it is up, its drain and deadline, and each of its
  devices with its status and the allocations on it.`, "")
}

func (c *hostStatusCommand) Run(args []string) int {
	fs := c.flags("host status")
	pos, ok := c.parse(fs, args, "<host-id>")
	if !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		h, _, err := cl.Host(ctx, pos[0], nil)
		if err != nil {
			return err
		}
		devs, _, err := cl.Devices(ctx, &client.DeviceFilter{Host: h.ID}, nil)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(struct {
				*client.Host
				DeviceList []client.Device `json:"device_list"`
			}{h, devs})
			return nil
		}
		c.output(formatHost(h, devs))
		return nil
	})
}

// formatHost prints a host and its devices.
func formatHost(h *client.Host, devs []client.Device) string {
	pairs := [][2]string{
		{"ID", h.ID},
		{"Address", orDash(h.Address)},
		{"State", hostState(h)},
		{"Since", formatTime(h.Since)},
		{"Labels", formatMap(h.Labels)},
	}
	if d := h.Drain; d != nil {
		pairs = append(pairs, [2]string{"Drained since", formatTime(d.Since)})
		deadline := "none (allocations run until released)"
		if !d.Deadline.IsZero() {
			deadline = formatTime(d.Deadline)
			if d.Ended {
				deadline += " (reached: allocations left ended as drained)"
			}
		}
		pairs = append(pairs, [2]string{"Drain deadline", deadline})
	}
	allocs := 0
	rows := make([][]string, len(devs))
	for i, d := range devs {
		allocs += len(d.Allocations)
		rows[i] = []string{d.ID, string(d.Type), orDash(d.Name), string(d.Status), orDash(strings.Join(d.Allocations, ","))}
	}
	pairs = append(pairs, [2]string{"Allocations", fmt.Sprint(allocs)})
	out := keyValues(pairs)
	if len(devs) > 0 {
		out += "\n\n" + table([]string{"DEVICE", "TYPE", "NAME", "STATUS", "ALLOCATIONS"}, rows)
	}
	return out
}

// hostDrainCommand is `dmsc host drain [-deadline D] [-disable] ID`.
type hostDrainCommand struct{ apiCommand }

func (c *hostDrainCommand) Synopsis() string { return "Drain a host, or end its drain" }

func (c *hostDrainCommand) Help() string {
	return helpText(`
Usage: dmsc host drain [options] <host-id>

  Drains a host, as nomad node drain does: new work avoids it at once.
  Its running allocations keep their devices until they are released, or
  until the deadline, when those left end as drained (in the history and
  the event stream). With -disable, ends the drain: the host takes new
  work again and waiting requests are placed on it if they fit.`, `
  -deadline=<duration>
    How long running allocations may keep their devices, such as 1h.
    Zero (the default) waits for them however long they run.

  -disable
    End the host's drain instead.`)
}

func (c *hostDrainCommand) Run(args []string) int {
	fs := c.flags("host drain")
	var (
		deadline time.Duration
		disable  bool
	)
	fs.DurationVar(&deadline, "deadline", 0, "")
	fs.BoolVar(&disable, "disable", false, "")
	pos, ok := c.parse(fs, args, "<host-id>")
	if !ok {
		return exitUsage
	}
	if deadline < 0 || (disable && deadline != 0) {
		return c.usageError("host drain", "-deadline must be positive, and cannot go with -disable")
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		var (
			h   *client.Host
			err error
		)
		if disable {
			h, _, err = cl.UndrainHost(ctx, pos[0])
		} else {
			h, _, err = cl.DrainHost(ctx, pos[0], deadline)
		}
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(h)
			return nil
		}
		switch {
		case h.Drain == nil:
			c.ui.Output(fmt.Sprintf("Host %s is no longer drained", h.ID))
		case h.Drain.Deadline.IsZero():
			c.ui.Output(fmt.Sprintf("Host %s is drained: no new work; running allocations keep their devices until released", h.ID))
		default:
			c.ui.Output(fmt.Sprintf("Host %s is drained: no new work; allocations left at %s end as drained", h.ID, formatTime(h.Drain.Deadline)))
		}
		return nil
	})
}

// hostForgetCommand is `dmsc host forget ID`.
type hostForgetCommand struct{ apiCommand }

func (c *hostForgetCommand) Synopsis() string { return "Remove a host that is gone" }

func (c *hostForgetCommand) Help() string {
	return helpText(`
Usage: dmsc host forget [options] <host-id>

  Removes a host and its devices from the cluster, for a host that is gone
  for good. Allocations on it end as lost. A host agent that is still
  running registers it again.`, "")
}

func (c *hostForgetCommand) Run(args []string) int {
	fs := c.flags("host forget")
	pos, ok := c.parse(fs, args, "<host-id>")
	if !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		meta, err := cl.RemoveHost(ctx, pos[0])
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(meta)
			return nil
		}
		c.ui.Output(fmt.Sprintf("Host %s forgotten (index %d)", pos[0], meta.Index))
		return nil
	})
}

// hostCommands are the host subcommands.
func hostCommands(ui cli.Ui) map[string]cli.CommandFactory {
	base := func() apiCommand { return apiCommand{ui: ui} }
	return map[string]cli.CommandFactory{
		"host": func() (cli.Command, error) {
			return &parentCommand{ui: ui, name: "host", synopsis: "List, inspect, drain and forget hosts",
				subs: []string{"list", "status", "drain", "forget"}}, nil
		},
		"host list":   func() (cli.Command, error) { return &hostListCommand{base()}, nil },
		"host status": func() (cli.Command, error) { return &hostStatusCommand{base()}, nil },
		"host drain":  func() (cli.Command, error) { return &hostDrainCommand{base()}, nil },
		"host forget": func() (cli.Command, error) { return &hostForgetCommand{base()}, nil },
	}
}
