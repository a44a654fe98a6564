package cluster

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Replicas compared (see DESIGN.md, "Integrity"). Every StateHashInterval
// applied entries each replica hashes the digest of its state
// (fsm.State.WriteDigest, byte-identical across replicas) right after applying the first entry at
// or past the multiple: a checkpoint. Which entry that is depends only on
// the log, so every replica checkpoints at the same index. Each server
// advertises its newest checkpoint in gossip; every server keeps the recent
// ones it has seen of each peer and compares those at the indexes it has
// too.

// Checkpoint is the hash of the replicated state right after the entry at
// Index was applied.
type Checkpoint struct {
	Index uint64 `json:"index"`
	Hash  string `json:"hash"`
}

func (c Checkpoint) String() string {
	if c.Index == 0 {
		return ""
	}
	return strconv.FormatUint(c.Index, 10) + ":" + c.Hash
}

func parseCheckpoint(s string) (Checkpoint, bool) {
	i, h, ok := strings.Cut(s, ":")
	if !ok {
		return Checkpoint{}, false
	}
	idx, err := strconv.ParseUint(i, 10, 64)
	if err != nil || idx == 0 || h == "" {
		return Checkpoint{}, false
	}
	return Checkpoint{Index: idx, Hash: h}, true
}

// keepCheckpoints is how many checkpoints are kept, of this replica and of
// each peer.
const keepCheckpoints = 16

// SetStateHashInterval turns checkpoints on: every `every` applied
// entries (0: off). on is called, under the FSM's lock, with each new
// checkpoint; it must not block. Call it before Raft starts.
func (f *RaftFSM) SetStateHashInterval(every uint64, on func(Checkpoint)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hashEvery, f.onCheckpoint = every, on
	f.restartCheckpointsLocked()
}

// Checkpoints returns this replica's recent checkpoints, the newest last.
func (f *RaftFSM) Checkpoints() []Checkpoint {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return append([]Checkpoint(nil), f.checkpoints...)
}

// StateHash hashes the state as it is now, with the applied index.
func (f *RaftFSM) StateHash() Checkpoint {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return Checkpoint{Index: f.applied, Hash: f.hashLocked()}
}

func (f *RaftFSM) restartCheckpointsLocked() {
	if f.hashEvery > 0 {
		f.hashNext = (f.applied/f.hashEvery + 1) * f.hashEvery
	}
}

// checkpointLocked records a checkpoint when the applied index has
// reached the next multiple of hashEvery.
func (f *RaftFSM) checkpointLocked() {
	if f.hashEvery == 0 || f.applied < f.hashNext {
		return
	}
	cp := Checkpoint{Index: f.applied, Hash: f.hashLocked()}
	f.restartCheckpointsLocked()
	f.checkpoints = append(f.checkpoints, cp)
	if len(f.checkpoints) > keepCheckpoints {
		f.checkpoints = append(f.checkpoints[:0], f.checkpoints[len(f.checkpoints)-keepCheckpoints:]...)
	}
	if f.onCheckpoint != nil {
		f.onCheckpoint(cp)
	}
}

// hashLocked is the first 8 bytes of the SHA-256 of the state's digest
// (fsm.State.WriteDigest: the canonical snapshot with the history as its
// count and the sum of its records' hashes, so that its cost does not
// grow with the history), in hex.
func (f *RaftFSM) hashLocked() string {
	h := sha256.New()
	if err := f.state.WriteDigest(h); err != nil {
		return "error"
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// Divergence is a state hash mismatch between servers at one index.
type Divergence struct {
	Index uint64 `json:"index"`
	// Hashes maps each server compared to its hash at Index.
	Hashes map[string]string `json:"hashes"`
	// Divergent lists the servers outside the largest group of equal
	// hashes (empty when no group is largest: then nobody can tell).
	Divergent []string `json:"divergent,omitempty"`
	// Seen is when this server first saw the mismatch.
	Seen time.Time `json:"seen"`
}

func (d *Divergence) String() string {
	ids := make([]string, 0, len(d.Hashes))
	for id := range d.Hashes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = id + "=" + d.Hashes[id]
	}
	who := "undecided"
	if len(d.Divergent) > 0 {
		who = strings.Join(d.Divergent, ",")
	}
	return fmt.Sprintf("state hashes differ at index %d (%s); divergent: %s", d.Index, strings.Join(parts, " "), who)
}

// compareCheckpoints compares this server's checkpoints with its peers'
// (by server ID) and returns the newest mismatch that no later checkpoint
// settled, or nil. A mismatch is settled once every server in it has
// agreed with all the others at a later index (a server resynced); a peer
// that merely has not advertised a later checkpoint yet settles nothing.
func compareCheckpoints(self string, mine []Checkpoint, peers map[string][]Checkpoint) *Divergence {
	settled := map[string]bool{}
	for i := len(mine) - 1; i >= 0; i-- {
		cp := mine[i]
		hashes := map[string]string{self: cp.Hash}
		for id, cps := range peers {
			for _, p := range cps {
				if p.Index == cp.Index {
					hashes[id] = p.Hash
				}
			}
		}
		if len(hashes) < 2 {
			continue // no peer has this one
		}
		groups := map[string][]string{}
		for id, h := range hashes {
			groups[h] = append(groups[h], id)
		}
		if len(groups) < 2 {
			for id := range hashes {
				settled[id] = true
			}
			continue
		}
		open := false
		for id, h := range hashes {
			if h != cp.Hash && !settled[id] {
				open = true
			}
		}
		if !open {
			continue
		}
		d := &Divergence{Index: cp.Index, Hashes: hashes}
		best, tie := "", false
		for h, ids := range groups {
			switch {
			case best == "" || len(ids) > len(groups[best]):
				best, tie = h, false
			case len(ids) == len(groups[best]):
				tie = true
			}
		}
		if !tie {
			for h, ids := range groups {
				if h != best {
					d.Divergent = append(d.Divergent, ids...)
				}
			}
			sort.Strings(d.Divergent)
		}
		return d
	}
	return nil
}
