package fsm

import (
	"bytes"
	"encoding/json"
)

// SnapshotV1Bytes writes the state in snapshot format 1, as builds before
// format 2 wrote it: the tests check that Restore still reads it, and
// edit its JSON to make bad snapshots.
func SnapshotV1Bytes(s *State) []byte {
	snap := snapshotV1{
		Version: 1, Now: s.now, Seq: s.seq, Last: s.last,
		Hosts:          s.Hosts(),
		Devices:        make([]*Device, 0, len(s.devices)),
		Live:           make([]*Allocation, 0, len(s.allocs)),
		History:        make([]*Allocation, 0, s.history.len()),
		Requests:       s.cache.entries(),
		snapshotConfig: s.snapshotConfig(),
	}
	if snap.Requests == nil {
		snap.Requests = []cacheEntry{}
	}
	for _, id := range sortedKeys(s.devices) {
		snap.Devices = append(snap.Devices, s.devices[id])
	}
	for _, id := range sortedKeys(s.allocs) {
		snap.Live = append(snap.Live, s.allocs[id])
	}
	s.history.each(func(a *Allocation) bool {
		snap.History = append(snap.History, a)
		return true
	})
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(&snap); err != nil {
		return nil
	}
	return b.Bytes()
}
