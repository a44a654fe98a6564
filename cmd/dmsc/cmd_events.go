package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/client"
)

// eventsCommand is `dmsc events`.
type eventsCommand struct{ apiCommand }

func (c *eventsCommand) Synopsis() string { return "Stream the cluster's events" }

func (c *eventsCommand) Help() string {
	return helpText(`
Usage: dmsc events [options]

  Streams what the cluster applies, live, one event per line: its log
  index, topic, type and key, and a summary of what changed (with -json,
  the stream's lines as the API sends them). Runs until interrupted; if
  the node serving it goes away it goes on from the last index on
  another of -address.`, `
  -topic=<topic>
      Allocation, Device, Host, Policy, Queue or Leader; Topic:<key> for
      one key (e.g. Allocation:<id>). Repeat for more. Default: all.

  -index=<n>
      Start after this log index (from the node's buffer of recent
      events). Default: from now on.

  -count=<n>
      Stop after n events. Default: run until interrupted.`)
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func (c *eventsCommand) Run(args []string) int {
	fs := c.flags("events")
	var topics multiFlag
	fs.Var(&topics, "topic", "")
	index := fs.Uint64("index", 0, "")
	count := fs.Int("count", 0, "")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch, err := cl.Events(ctx, topics, *index)
		if err != nil {
			return err
		}
		left := *count // 0: no end
		for b := range ch {
			if b.Err != nil {
				return b.Err
			}
			evs := b.Events
			if *count > 0 {
				evs = evs[:min(len(evs), left)]
				left -= len(evs)
			}
			if c.json {
				line, _ := json.Marshal(struct {
					Index  uint64         `json:"index"`
					Events []client.Event `json:"events"`
				}{b.Index, evs})
				c.ui.Output(string(line))
			} else {
				for _, ev := range evs {
					c.ui.Output(formatEvent(ev))
				}
			}
			if *count > 0 && left == 0 {
				return nil
			}
		}
		return nil
	})
}

// formatEvent is one event on one line.
func formatEvent(ev client.Event) string {
	line := fmt.Sprintf("%d  %-10s  %-10s  %s", ev.Index, ev.Topic, ev.Type, ev.Key)
	if s := eventSummary(ev); s != "" {
		line += "  " + s
	}
	return line
}

// eventSummary is what an event's payload says in a few words.
func eventSummary(ev client.Event) string {
	switch ev.Topic {
	case client.TopicAllocation, client.TopicQueue:
		var a client.Allocation
		if json.Unmarshal(ev.Payload, &a) != nil {
			return ""
		}
		parts := []string{"namespace=" + a.Namespace, "status=" + string(a.Status)}
		if a.Host != "" {
			parts = append(parts, "host="+a.Host, "devices="+deviceList(&a))
		}
		if a.Reason != "" {
			parts = append(parts, fmt.Sprintf("reason=%q", a.Reason))
		}
		return strings.Join(parts, " ")
	case client.TopicDevice:
		var d client.Device
		if json.Unmarshal(ev.Payload, &d) != nil {
			return ""
		}
		return fmt.Sprintf("host=%s type=%s status=%s", d.Host, d.Type, d.Status)
	case client.TopicHost:
		var h client.Host
		if json.Unmarshal(ev.Payload, &h) != nil {
			return ""
		}
		return fmt.Sprintf("up=%t devices=%d", h.Up, len(h.Devices))
	case client.TopicPolicy:
		var p client.PolicyEvent
		if json.Unmarshal(ev.Payload, &p) != nil {
			return ""
		}
		return "policy=" + orDash(string(p.Config.Policy))
	case client.TopicLeader:
		var l client.LeaderEvent
		if json.Unmarshal(ev.Payload, &l) != nil {
			return ""
		}
		return "address=" + l.Address
	}
	return ""
}

// watchAllocation prints each change to a from the event stream after
// index (the read that gave a), until it ends or ctx does.
func (c *allocStatusCommand) watchAllocation(ctx context.Context, cl *client.Client, a *client.Allocation, index uint64) error {
	topics := []string{client.TopicAllocation + ":" + a.ID}
	ch, err := cl.Events(ctx, topics, index)
	if errors.Is(err, client.ErrIndexTooOld) {
		// The node no longer buffers what followed the read: stream from
		// now on, read again, and go on from that read.
		if ch, err = cl.Events(ctx, topics, 0); err != nil {
			return err
		}
		cur, meta, err := cl.Allocation(ctx, a.ID, nil)
		if err != nil {
			return err
		}
		if cur.Status != a.Status {
			c.printWatched(cur)
		}
		a, index = cur, meta.Index
	}
	if err != nil {
		return err
	}
	for b := range ch {
		if b.Err != nil {
			return b.Err
		}
		for _, ev := range b.Events {
			if ev.Index <= index {
				continue
			}
			var cur client.Allocation
			if err := json.Unmarshal(ev.Payload, &cur); err != nil {
				return fmt.Errorf("event payload: %w", err)
			}
			a = &cur
			c.printWatched(a)
		}
		if allocEnded(a.Status) {
			return nil
		}
	}
	return ctx.Err()
}

// printWatched prints one state of a watched allocation.
func (c *allocStatusCommand) printWatched(a *client.Allocation) {
	if c.json {
		c.printJSON(a)
		return
	}
	at := a.RequestedAt
	for _, t := range []time.Time{a.AllocatedAt, a.EndedAt} {
		if t.After(at) {
			at = t
		}
	}
	line := fmt.Sprintf("%s  %s", formatTime(at), a.Status)
	if a.Host != "" {
		line += "  host=" + a.Host + " devices=" + deviceList(a)
	}
	if a.Reason != "" {
		line += fmt.Sprintf("  reason=%q", a.Reason)
	}
	c.ui.Output(line)
}

// allocEnded reports whether an allocation with status s has ended.
func allocEnded(s client.AllocStatus) bool { return s != client.Pending && s != client.Active }

// eventCommands are the commands that follow the cluster live.
func eventCommands(ui cli.Ui) map[string]cli.CommandFactory {
	return map[string]cli.CommandFactory{
		"events":  func() (cli.Command, error) { return &eventsCommand{apiCommand{ui: ui}}, nil },
		"monitor": func() (cli.Command, error) { return &monitorCommand{apiCommand{ui: ui}}, nil },
	}
}

var _ flag.Value = (*multiFlag)(nil)

// monitorCommand is `dmsc monitor`.
type monitorCommand struct{ apiCommand }

func (c *monitorCommand) Synopsis() string { return "Stream an agent's log" }

func (c *monitorCommand) Help() string {
	return helpText(`
Usage: dmsc monitor [options]

  Streams the log of the agent at -address (the first, if several), live,
  at the level asked for whatever the agent's own, until interrupted.`, `
  -log-level=<level>
      trace, debug, info, warn or error. Default: info.

  -log-json
      hclog's JSON lines instead of text.`)
}

func (c *monitorCommand) Run(args []string) int {
	fs := c.flags("monitor")
	level := fs.String("log-level", "info", "")
	logJSON := fs.Bool("log-json", false, "")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		lines, err := cl.Monitor(ctx, *level, *logJSON)
		if err != nil {
			return err
		}
		for l := range lines {
			c.ui.Output(l)
		}
		return nil
	})
}
