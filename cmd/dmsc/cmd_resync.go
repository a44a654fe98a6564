package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/cluster"
)

// raftResyncCommand is `dmsc operator raft resync`: run on a stopped
// server whose Raft state is damaged or divergent.
type raftResyncCommand struct{ ui cli.Ui }

func (c *raftResyncCommand) Synopsis() string {
	return "Move a stopped server's Raft state aside so that it fetches it again from the other servers"
}

func (c *raftResyncCommand) Help() string {
	return strings.TrimSpace(`
Usage: dmsc operator raft resync -data-dir DIR

  Run on a STOPPED server whose Raft state is damaged (it refuses to start,
  or stopped at a corrupt log entry) or whose state differs from the other
  servers'. Moves DIR/raft (the log store and the snapshots) aside to
  DIR/raft.corrupt-<time>, keeping the node's identity and gossip keyring,
  and marks DIR so that the server never bootstraps a new cluster.

  Start the agent again with its usual command line: it comes back empty,
  the leader adds it back as a non-voter, it catches up from a snapshot and
  is made a voter once stable. This needs a leader, i.e. a majority of the
  other servers with a good copy. Delete the moved directory once the
  server is back.

Options:

  -data-dir DIR   the server's data directory (required)
`)
}

func (c *raftResyncCommand) Run(args []string) int {
	fs := flag.NewFlagSet("operator raft resync", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dir := fs.String("data-dir", "", "")
	if err := fs.Parse(args); err != nil || *dir == "" || fs.NArg() > 0 {
		c.ui.Error("usage: dmsc operator raft resync -data-dir DIR")
		return exitUsage
	}
	aside, err := cluster.ResyncDataDir(*dir, time.Now())
	if err != nil {
		c.ui.Error("dmsc operator raft resync: " + err.Error())
		return exitError
	}
	c.ui.Output(fmt.Sprintf("Moved the Raft state aside to %s.\nStart the agent again: it rejoins as a non-voter and fetches the state from the leader.", aside))
	return exitOK
}
