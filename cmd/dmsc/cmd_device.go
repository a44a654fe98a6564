package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/client"
)

// deviceListCommand is `dmsc device list`.
type deviceListCommand struct{ apiCommand }

func (c *deviceListCommand) Synopsis() string { return "List devices" }

func (c *deviceListCommand) Help() string {
	return helpText(`
Usage: dmsc device list [options]

  Lists every device, sorted by ID, with its status and use.`, `
-type=<type>, -pool=<pool>, -host=<host>
      Only devices of this type, pool or host.

  -status=<status>
      Only devices that are available, draining, unhealthy or offline.`)
}

func (c *deviceListCommand) Run(args []string) int {
	fs := c.flags("device list")
	var f client.DeviceFilter
	var typ, status string
	fs.StringVar(&typ, "type", "", "")
	fs.StringVar(&f.Pool, "pool", "", "")
	fs.StringVar(&f.Host, "host", "", "")
	fs.StringVar(&status, "status", "", "")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	if typ != "" {
		f.Type = deviceType(typ)
	}
	f.Status = client.DeviceStatus(strings.ToLower(status))
	return c.run(func(ctx context.Context, cl *client.Client) error {
		devs, _, err := cl.Devices(ctx, &f, nil)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(devs)
			return nil
		}
		if len(devs) == 0 {
			c.ui.Output("No devices")
			return nil
		}
		rows := make([][]string, len(devs))
		for i := range devs {
			d := &devs[i]
			rows[i] = []string{d.ID, string(d.Type), orDash(d.Name), d.Host, orDash(d.Pool), string(d.Status),
				orDash(formatResources(d.Capabilities.Resources, "=")), deviceUse(d)}
		}
		c.output(table([]string{"ID", "TYPE", "NAME", "HOST", "POOL", "STATUS", "CAPABILITIES", "IN USE"}, rows))
		return nil
	})
}

// deviceUse says how much of a device is taken: "no", "yes (1)", or the
// used amounts of a shareable device.
func deviceUse(d *client.Device) string {
	if len(d.Allocations) == 0 {
		return "no"
	}
	if d.Shareable {
		return fmt.Sprintf("%s (%d)", formatResources(d.Used, "="), len(d.Allocations))
	}
	return fmt.Sprintf("yes (%d)", len(d.Allocations))
}

// deviceStatusCommand is `dmsc device status ID`.
type deviceStatusCommand struct{ apiCommand }

func (c *deviceStatusCommand) Synopsis() string { return "Show one device" }

func (c *deviceStatusCommand) Help() string {
	return helpText(`
Usage: dmsc device status [options] <device-id>

  Shows a device: its capabilities, labels, status, and the allocations
  it holds.`, "")
}

func (c *deviceStatusCommand) Run(args []string) int {
	fs := c.flags("device status")
	pos, ok := c.parse(fs, args, "<device-id>")
	if !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		d, _, err := cl.Device(ctx, pos[0], nil)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(d)
			return nil
		}
		c.output(formatDevice(d))
		return nil
	})
}

// formatDevice prints a device in detail.
func formatDevice(d *client.Device) string {
	pairs := [][2]string{
		{"ID", d.ID},
		{"Type", string(d.Type)},
		{"Name", orDash(d.Name)},
		{"Host", d.Host},
		{"Pool", orDash(d.Pool)},
		{"Status", string(d.Status)},
		{"Shareable", fmt.Sprint(d.Shareable)},
		{"Capabilities", orDash(formatResources(d.Capabilities.Resources, "="))},
	}
	if len(d.Capabilities.Custom) > 0 {
		pairs = append(pairs, [2]string{"Custom", formatMap(d.Capabilities.Custom)})
	}
	pairs = append(pairs,
		[2]string{"Labels", formatMap(d.Labels)},
		[2]string{"Used", orDash(formatResources(d.Used, "="))},
		[2]string{"Allocations", orDash(strings.Join(d.Allocations, ","))},
	)
	return keyValues(pairs)
}

// deviceSetCommand is `dmsc device drain|undrain|unhealthy ID`.
type deviceSetCommand struct {
	apiCommand
	verb   string
	status client.DeviceStatus
}

func (c *deviceSetCommand) Synopsis() string {
	switch c.status {
	case client.Draining:
		return "Stop placing new allocations on a device"
	case client.Unhealthy:
		return "Mark a device unhealthy"
	}
	return "Make a drained or unhealthy device available again"
}

func (c *deviceSetCommand) Help() string {
	text := map[client.DeviceStatus]string{
		client.Draining:  "Drains a device: it keeps its allocations but takes no new ones.",
		client.Unhealthy: "Marks a device unhealthy: it keeps its allocations but takes no new\n  ones, and the recommendations advise replacing it.",
		client.Available: "Makes a draining or unhealthy device available again; waiting\n  requests are placed on it at once if they fit.",
	}[c.status]
	return helpText(fmt.Sprintf("Usage: dmsc device %s [options] <device-id>\n\n  %s", c.verb, text), "")
}

func (c *deviceSetCommand) Run(args []string) int {
	fs := c.flags("device " + c.verb)
	pos, ok := c.parse(fs, args, "<device-id>")
	if !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		d, _, err := cl.SetDeviceStatus(ctx, pos[0], c.status)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(d)
			return nil
		}
		c.ui.Output(fmt.Sprintf("Device %s is %s (%d allocations on it)", d.ID, d.Status, len(d.Allocations)))
		return nil
	})
}

// deviceCommands are the device subcommands.
func deviceCommands(ui cli.Ui) map[string]cli.CommandFactory {
	base := func() apiCommand { return apiCommand{ui: ui} }
	set := func(verb string, st client.DeviceStatus) cli.CommandFactory {
		return func() (cli.Command, error) { return &deviceSetCommand{base(), verb, st}, nil }
	}
	return map[string]cli.CommandFactory{
		"device": func() (cli.Command, error) {
			return &parentCommand{ui: ui, name: "device", synopsis: "List, inspect and drain devices",
				subs: []string{"list", "status", "drain", "undrain", "unhealthy"}}, nil
		},
		"device list":      func() (cli.Command, error) { return &deviceListCommand{base()}, nil },
		"device status":    func() (cli.Command, error) { return &deviceStatusCommand{base()}, nil },
		"device drain":     set("drain", client.Draining),
		"device undrain":   set("undrain", client.Available),
		"device unhealthy": set("unhealthy", client.Unhealthy),
	}
}
