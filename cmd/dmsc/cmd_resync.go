package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dmsc/dmsc/client"
	"github.com/dmsc/dmsc/cluster"
)

// raftResyncCommand is `dmsc operator raft resync`: run on a stopped
// server whose Raft state is damaged or divergent.
type raftResyncCommand struct{ apiCommand }

func (c *raftResyncCommand) Synopsis() string {
	return "Move a stopped server's Raft state aside so that it fetches it again from the other servers"
}

func (c *raftResyncCommand) Help() string {
	return helpText(`
Usage: dmsc operator raft resync [options] -data-dir DIR -node ID

  Run on a STOPPED server whose Raft state is damaged (it refuses to start,
  or stopped at a corrupt log entry) or whose state differs from the other
  servers'. In order:

  1. asks the cluster (-address: the other servers) to remove server ID
     from the Raft configuration, so that it can never vote while empty:
     an empty voter could help elect a leader that lacks acknowledged
     writes;
  2. moves DIR/raft (the log store and the snapshots) aside to
     DIR/raft.corrupt-<time>, keeping the node's gossip keyring, and marks
     DIR so that the server never bootstraps a new cluster;
  3. readmits ID: started again with its usual command line, the server
     comes back empty, the leader adds it as a non-voter, it catches up
     from a snapshot and is made a voter once stable.

  This needs a leader, i.e. a majority of the other servers with a good
  copy (operator write with ACLs on). Delete the moved directory once the
  server is back.`, `
  -data-dir DIR   the server's data directory (required)

  -node ID        the server's node name, its Raft ID (required)`)
}

func (c *raftResyncCommand) Run(args []string) int {
	fs := c.flags("operator raft resync")
	dir := fs.String("data-dir", "", "")
	node := fs.String("node", "", "")
	if _, ok := c.parse(fs, args); !ok {
		return exitUsage
	}
	if *dir == "" || *node == "" {
		c.ui.Error("usage: dmsc operator raft resync [options] -data-dir DIR -node ID")
		return exitUsage
	}
	// Refuse before the cluster is asked anything when the agent runs.
	if err := cluster.CheckDataDirFree(*dir); err != nil {
		c.ui.Error("dmsc operator raft resync: " + err.Error())
		return exitError
	}
	return c.run(func(ctx context.Context, cl *client.Client) error {
		if _, err := cl.RemovePeer(ctx, *node); err != nil && !errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("removing %s from the Raft configuration first: %w", *node, err)
		}
		aside, err := cluster.ResyncDataDir(*dir, time.Now())
		if err != nil {
			return fmt.Errorf("%w (server %s stays removed: `dmsc operator raft readmit %s` lets it back)", err, *node, *node)
		}
		if _, err := cl.ReadmitPeer(ctx, *node); err != nil && !errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("moved the Raft state aside to %s, but readmitting %s failed: %w (run `dmsc operator raft readmit %s`)", aside, *node, err, *node)
		}
		c.ui.Output(fmt.Sprintf("Removed server %s, moved its Raft state aside to %s and readmitted it.\n"+
			"Start the agent again: it rejoins as a non-voter, fetches the state from the leader and becomes a voter once stable.", *node, aside))
		return nil
	})
}
