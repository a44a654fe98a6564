package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/cluster"
)

// raftRecoverPeersCommand is `dmsc operator raft recover-peers`: writes
// the quorum-loss recovery file on a stopped surviving server.
type raftRecoverPeersCommand struct{ ui cli.Ui }

func (c *raftRecoverPeersCommand) Synopsis() string {
	return "Write peers.json on a stopped server to recover from a lost quorum"
}

func (c *raftRecoverPeersCommand) Help() string {
	return strings.TrimSpace(`
Usage: dmsc operator raft recover-peers -data-dir DIR -peer ID=ADDR [-peer ID=ADDR ...]

  Only when a majority of the servers is gone for good (no leader can be
  elected, writes answer 503 no_leader). Run on each STOPPED surviving
  server, with the same peers: it writes DIR/raft/peers.json, listing the
  servers that remain. Started again, the agent replaces its Raft
  configuration with that one, renames the file to peers.info, and the
  survivors elect a leader among themselves. Writes acknowledged only by
  the lost servers are lost. See "Lost quorum" in deploy/README.md.

Options:

  -data-dir DIR          the server's data directory (required)

  -peer ID=ADDR          a surviving server: its node name and Raft
                         address (host:port); repeat for each, this one
                         included

  -non-voter-peer ID=ADDR
                         a surviving server to keep as a non-voter`)
}

func (c *raftRecoverPeersCommand) Run(args []string) int {
	fs := flag.NewFlagSet("operator raft recover-peers", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dir := fs.String("data-dir", "", "")
	var voters, nonVoters listFlag
	fs.Var(&voters, "peer", "")
	fs.Var(&nonVoters, "non-voter-peer", "")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *dir == "" || len(voters) == 0 {
		if err != nil {
			c.ui.Error(err.Error())
		}
		c.ui.Error("usage: dmsc operator raft recover-peers -data-dir DIR -peer ID=ADDR [-peer ID=ADDR ...]")
		return exitUsage
	}
	var peers []cluster.Peer
	for i, list := range []listFlag{voters, nonVoters} {
		for _, kv := range list {
			id, addr, ok := strings.Cut(kv, "=")
			if !ok {
				c.ui.Error(fmt.Sprintf("peer %q: want ID=ADDR", kv))
				return exitUsage
			}
			peers = append(peers, cluster.Peer{ID: id, Address: addr, NonVoter: i == 1})
		}
	}
	path, err := cluster.WritePeersFile(*dir, peers)
	if err != nil {
		c.ui.Error("dmsc operator raft recover-peers: " + err.Error())
		return exitError
	}
	c.ui.Output(fmt.Sprintf("Wrote %s with %d servers. Write the same file on every surviving server, then start them:\n"+
		"each replaces its Raft configuration with it at start and renames it to peers.info.", path, len(peers)))
	return exitOK
}
