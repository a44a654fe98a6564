package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/fsm"
)

// Quorum-loss recovery, as Consul's and Nomad's peers.json: when a
// majority of the servers is gone for good, the operator stops the
// survivors, writes DATA/raft/peers.json on each (the servers that remain,
// in the format of raft.ReadConfigJSON: [{"id", "address", "non_voter"}])
// and starts them again. At start, before Raft runs, the server replaces
// the Raft configuration in its stores with that one (raft.RecoverCluster)
// and renames the file to peers.info, so that it is used once. See
// "Lost quorum" in deploy/README.md and DESIGN.md.

// PeersFile and PeersInfoFile are the recovery file in DATA/raft and the
// name it is renamed to once used.
const (
	PeersFile     = "peers.json"
	PeersInfoFile = "peers.info"
)

// ErrRecovery: the recovery file is there but cannot be used; the server
// does not start, and the file is left in place.
var ErrRecovery = errors.New("quorum-loss recovery failed")

// recoverPeers applies DATA/raft/peers.json, when there is one, to the
// stores. Called by startRaft before Raft starts.
func (n *Node) recoverPeers(stores *raftStores) error {
	if n.cfg.DataDir == "" {
		return nil
	}
	dir := filepath.Join(n.cfg.DataDir, "raft")
	path := filepath.Join(dir, PeersFile)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return nil
	} else if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrRecovery, path, err)
	}
	conf, err := raft.ReadConfigJSON(path)
	if err != nil {
		return fmt.Errorf("%w: %s: %w (the format is a JSON list of {\"id\", \"address\", \"non_voter\"})", ErrRecovery, path, err)
	}
	self := false
	for _, s := range conf.Servers {
		if string(s.ID) == n.cfg.NodeID {
			self = true
			if s.Suffrage != raft.Voter {
				return fmt.Errorf("%w: %s lists this server (%s) as a non-voter; a surviving server must vote", ErrRecovery, path, n.cfg.NodeID)
			}
		}
	}
	if !self {
		return fmt.Errorf("%w: %s does not list this server (%s); list every surviving server, this one included", ErrRecovery, path, n.cfg.NodeID)
	}
	n.log.Warn("found a quorum-loss recovery file: replacing the Raft configuration", "file", path, "servers", conf.Servers)
	// RecoverCluster replays the snapshot and the log through an FSM
	// and takes a snapshot of it: a throwaway one (the node's own starts
	// with Raft).
	tmp := NewRaftFSM(fsm.New())
	tmp.version = n.cfg.Version
	if err := raft.RecoverCluster(n.raftConfig(), tmp, stores.logs, stores.stable, stores.snaps, n.raftTrans, conf); err != nil {
		if h := tmp.Halt(); h != nil {
			err = fmt.Errorf("%w (%w)", err, h)
		}
		return fmt.Errorf("%w: %s: %w", ErrRecovery, path, err)
	}
	if err := os.Rename(path, filepath.Join(dir, PeersInfoFile)); err != nil {
		return fmt.Errorf("%w: the Raft configuration was replaced, but %s could not be renamed (remove it before the next start): %w", ErrRecovery, path, err)
	}
	n.log.Warn("quorum-loss recovery done: the Raft configuration is now the servers of the recovery file; it was renamed",
		"servers", len(conf.Servers), "renamed_to", filepath.Join(dir, PeersInfoFile))
	return nil
}

// Peer is one server of a recovery file.
type Peer struct {
	ID       string `json:"id"`
	Address  string `json:"address"`
	NonVoter bool   `json:"non_voter"`
}

// WritePeersFile writes DATA/raft/peers.json for a stopped server (dmsc
// operator raft recover-peers): the servers that remain after a quorum
// loss. It refuses while an agent holds the data directory, when the
// directory has no Raft state, when a peer is malformed or listed twice,
// or when no peer votes. It returns the file's path.
func WritePeersFile(dataDir string, peers []Peer) (string, error) {
	if err := CheckDataDirFree(dataDir); err != nil {
		return "", err
	}
	dir := filepath.Join(dataDir, "raft")
	if _, err := os.Stat(filepath.Join(dir, "raft.db")); err != nil {
		return "", fmt.Errorf("%s holds no Raft state (%w): recovery is for the data directory of a surviving server", dataDir, err)
	}
	seen := map[string]bool{}
	voters := 0
	for _, p := range peers {
		if p.ID == "" || p.Address == "" {
			return "", fmt.Errorf("peer %q: an ID and a Raft address (host:port) are needed", p.ID+"="+p.Address)
		}
		if _, _, err := net.SplitHostPort(p.Address); err != nil {
			return "", fmt.Errorf("peer %s: address %q: %w", p.ID, p.Address, err)
		}
		if seen[p.ID] || seen["addr:"+p.Address] {
			return "", fmt.Errorf("peer %s (%s) is listed twice", p.ID, p.Address)
		}
		seen[p.ID], seen["addr:"+p.Address] = true, true
		if !p.NonVoter {
			voters++
		}
	}
	if voters == 0 {
		return "", errors.New("no peer votes: list at least the surviving servers as voters")
	}
	b, err := json.MarshalIndent(peers, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, PeersFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return "", err
	}
	if _, err := raft.ReadConfigJSON(tmp); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("the file does not read back: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return path, nil
}
