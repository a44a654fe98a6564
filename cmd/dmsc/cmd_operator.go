package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/client"
)

// membersCommand is `dmsc members`.
type membersCommand struct{ apiCommand }

func (c *membersCommand) Synopsis() string { return "List the cluster's servers and hosts" }

func (c *membersCommand) Help() string {
	return helpText(`
Usage: dmsc members [options]

  Lists every node gossip knows, servers and hosts, alive or not, as the
  answering node sees them.`, "")
}

func (c *membersCommand) Run(args []string) int {
	fs := c.flags("members")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		members, err := cl.Members(ctx)
		if err != nil {
			return err
		}
		if c.json {
			c.printJSON(members)
			return nil
		}
		rows := make([][]string, len(members))
		for i, m := range members {
			role := "host"
			switch {
			case m.Server && m.Host:
				role = "server+host"
			case m.Server:
				role = "server"
			}
			status := m.Status
			if m.Integrity != "" {
				status += " (" + m.Integrity + ")"
			}
			rows[i] = []string{m.ID, m.GossipAddr, orDash(m.HTTPAddr), role, status, fmt.Sprint(m.Leader), m.Version}
		}
		c.output(table([]string{"ID", "ADDRESS", "HTTP", "ROLE", "STATUS", "LEADER", "VERSION"}, rows))
		return nil
	})
}

// raftListPeersCommand is `dmsc operator raft list-peers`.
type raftListPeersCommand struct{ apiCommand }

func (c *raftListPeersCommand) Synopsis() string { return "List the Raft servers" }

func (c *raftListPeersCommand) Help() string {
	return helpText(`
Usage: dmsc operator raft list-peers [options]

  Lists the servers of the Raft configuration: which one leads, which
  vote and which are non-voters (new servers catching up before they are
  promoted), and the servers an operator removed.`, "")
}

func (c *raftListPeersCommand) Run(args []string) int {
	fs := c.flags("operator raft list-peers")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		rc, err := cl.RaftConfiguration(ctx)
		if err != nil {
			return err
		}
		c.printRaft(rc)
		return nil
	})
}

func (c *apiCommand) printRaft(rc *client.RaftConfiguration) {
	if c.json {
		c.printJSON(rc)
		return
	}
	rows := make([][]string, len(rc.Servers))
	for i, s := range rc.Servers {
		state := "follower"
		if s.Leader {
			state = "leader"
		}
		rows[i] = []string{s.ID, s.Address, state, fmt.Sprint(s.Voter)}
	}
	c.output(table([]string{"ID", "ADDRESS", "STATE", "VOTER"}, rows))
	if len(rc.Removed) > 0 {
		removed := make([][]string, len(rc.Removed))
		for i, r := range rc.Removed {
			removed[i] = []string{r.ID, r.Since.Format(time.RFC3339)}
		}
		c.output("\nRemoved by an operator (not added back until readmitted):\n" + table([]string{"ID", "SINCE"}, removed))
	}
}

// raftRemovePeerCommand is `dmsc operator raft remove-peer ID`.
type raftRemovePeerCommand struct{ apiCommand }

func (c *raftRemovePeerCommand) Synopsis() string {
	return "Remove a dead server from the Raft configuration"
}

func (c *raftRemovePeerCommand) Help() string {
	return helpText(`
Usage: dmsc operator raft remove-peer [options] <server-id>

  Removes a server from the Raft configuration, so that the quorum no
  longer counts it, and keeps it out: the leader does not add it back,
  even while it runs, until "dmsc operator raft readmit" lifts that.
  Prints the new configuration.`, "")
}

func (c *raftRemovePeerCommand) Run(args []string) int {
	fs := c.flags("operator raft remove-peer")
	pos, ok := c.parse(fs, args, "<server-id>")
	if !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		rc, err := cl.RemovePeer(ctx, pos[0])
		if err != nil {
			return err
		}
		if !c.json {
			c.ui.Output(fmt.Sprintf("Removed server %s\n", pos[0]))
		}
		c.printRaft(rc)
		return nil
	})
}

// raftReadmitCommand is `dmsc operator raft readmit ID`.
type raftReadmitCommand struct{ apiCommand }

func (c *raftReadmitCommand) Synopsis() string {
	return "Let a removed server join again"
}

func (c *raftReadmitCommand) Help() string {
	return helpText(`
Usage: dmsc operator raft readmit [options] <server-id>

  Lifts an operator's removal of a server: when it runs, the leader adds
  it again, first as a non-voter, and makes it a voter once it has caught
  up and stayed healthy for the stabilization time. Prints the new
  configuration.`, "")
}

func (c *raftReadmitCommand) Run(args []string) int {
	fs := c.flags("operator raft readmit")
	pos, ok := c.parse(fs, args, "<server-id>")
	if !ok {
		return exitUsage
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		rc, err := cl.ReadmitPeer(ctx, pos[0])
		if err != nil {
			return err
		}
		if !c.json {
			c.ui.Output(fmt.Sprintf("Readmitted server %s\n", pos[0]))
		}
		c.printRaft(rc)
		return nil
	})
}

// snapshotCommand is `dmsc operator snapshot save|restore FILE`.
type snapshotCommand struct {
	apiCommand
	restore bool
}

func (c *snapshotCommand) verb() string {
	if c.restore {
		return "restore"
	}
	return "save"
}

func (c *snapshotCommand) Synopsis() string {
	if c.restore {
		return "Replace the cluster's state with a snapshot"
	}
	return "Save the cluster's state to a file"
}

func (c *snapshotCommand) Help() string {
	if c.restore {
		return helpText(`
Usage: dmsc operator snapshot restore [options] <file>

  Replaces the whole replicated state with a snapshot made by 'dmsc
  operator snapshot save' (disaster recovery). Everything since the
  snapshot is lost.`, "")
	}
	return helpText(`
Usage: dmsc operator snapshot save [options] <file>

  Saves the replicated state, as of a consistent read, to a file for
  backup. The file is written whole or not at all.`, "")
}

func (c *snapshotCommand) Run(args []string) int {
	fs := c.flags("operator snapshot " + c.verb())
	pos, ok := c.parse(fs, args, "<file>")
	if !ok {
		return exitUsage
	}
	path := pos[0]
	return c.run(func(ctx context.Context, cl *client.Client) error {
		if c.restore {
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			meta, err := cl.SnapshotRestore(ctx, f)
			if err != nil {
				return err
			}
			if c.json {
				c.printJSON(map[string]uint64{"index": meta.Index})
				return nil
			}
			c.ui.Output(fmt.Sprintf("Restored snapshot %s (state index now %d)", path, meta.Index))
			return nil
		}
		tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
		if err != nil {
			return err
		}
		defer os.Remove(tmp.Name())
		meta, err := cl.SnapshotSave(ctx, tmp)
		if err == nil {
			err = tmp.Sync()
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		info, err := os.Stat(tmp.Name())
		if err != nil {
			return err
		}
		if err := os.Rename(tmp.Name(), path); err != nil {
			return err
		}
		if c.json {
			c.printJSON(map[string]any{"index": meta.Index, "bytes": info.Size(), "file": path})
			return nil
		}
		c.ui.Output(fmt.Sprintf("Saved snapshot at index %d to %s (%d bytes)", meta.Index, path, info.Size()))
		return nil
	})
}

// operatorCommands are the cluster operation subcommands.
func operatorCommands(ui cli.Ui) map[string]cli.CommandFactory {
	base := func() apiCommand { return apiCommand{ui: ui} }
	parent := func(name, synopsis string, subs ...string) cli.CommandFactory {
		return func() (cli.Command, error) {
			return &parentCommand{ui: ui, name: name, synopsis: synopsis, subs: subs}, nil
		}
	}
	return map[string]cli.CommandFactory{
		"members":                     func() (cli.Command, error) { return &membersCommand{base()}, nil },
		"operator":                    parent("operator", "Operate the cluster: Raft peers, snapshots and gossip keys", "raft", "snapshot", "keygen", "keyring"),
		"operator keygen":             func() (cli.Command, error) { return &keygenCommand{ui: ui}, nil },
		"operator keyring":            func() (cli.Command, error) { return &keyringCommand{base()}, nil },
		"operator raft":               parent("operator raft", "Inspect and change the Raft configuration", "list-peers", "remove-peer", "readmit", "resync", "recover-peers"),
		"operator raft list-peers":    func() (cli.Command, error) { return &raftListPeersCommand{base()}, nil },
		"operator raft remove-peer":   func() (cli.Command, error) { return &raftRemovePeerCommand{base()}, nil },
		"operator raft readmit":       func() (cli.Command, error) { return &raftReadmitCommand{base()}, nil },
		"operator raft resync":        func() (cli.Command, error) { return &raftResyncCommand{base()}, nil },
		"operator raft recover-peers": func() (cli.Command, error) { return &raftRecoverPeersCommand{ui: ui}, nil },
		"operator snapshot":           parent("operator snapshot", "Save and restore the cluster's state", "save", "restore"),
		"operator snapshot save":      func() (cli.Command, error) { return &snapshotCommand{base(), false}, nil },
		"operator snapshot restore":   func() (cli.Command, error) { return &snapshotCommand{base(), true}, nil },
	}
}

// apiCommands are every subcommand over the HTTP API.
func apiCommands(ui cli.Ui) map[string]cli.CommandFactory {
	out := map[string]cli.CommandFactory{}
	for _, group := range []map[string]cli.CommandFactory{
		allocCommands(ui), deviceCommands(ui), hostCommands(ui), quotaCommands(ui), policyCommands(ui), operatorCommands(ui), aclCommands(ui), eventCommands(ui),
	} {
		for k, f := range group {
			out[k] = f
		}
	}
	return out
}
