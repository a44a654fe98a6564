package fsm

// Sizes counts what the replicated state holds; memory grows with these.
type Sizes struct {
	Hosts           int `json:"hosts"`
	Devices         int `json:"devices"`
	LiveAllocations int `json:"allocations_live"`
	HistoryRecords  int `json:"history_records"`
}

// Sizes returns the state's counts, in constant time.
func (s *State) Sizes() Sizes {
	return Sizes{Hosts: len(s.hosts), Devices: len(s.devices), LiveAllocations: len(s.allocs), HistoryRecords: s.history.len()}
}

// HistoryLen is how many ended allocations the history keeps.
func (s *State) HistoryLen() int { return s.history.len() }

// Heap bytes per item of the state, derived indexes included, measured by
// BenchmarkMemory (BENCHMARKS.md, "Memory"): GPU hosts with a label and
// an address, single-GPU requests. Labels, long IDs and multi-device
// claims cost more.
// Measured: 1,525 B/host, 733 B/device, 1,045 B/live allocation, 713 B
// per history record (linux/amd64, Go 1.26), of which some 250 are the
// record (the history keeps records as bytes, history.go), its entry and
// its index entry, the rest the statistics' share and the request IDs the
// benchmark's commands leave in the request cache; rounded up here.
const (
	BytesPerHost           = 1600
	BytesPerDevice         = 750
	BytesPerLiveAllocation = 1100
	BytesPerHistoryRecord  = 750
)

// EstimatedBytes estimates the heap the state takes from its counts and
// the measured costs per item.
func (z Sizes) EstimatedBytes() int64 {
	return int64(z.Hosts)*BytesPerHost + int64(z.Devices)*BytesPerDevice +
		int64(z.LiveAllocations)*BytesPerLiveAllocation + int64(z.HistoryRecords)*BytesPerHistoryRecord
}
