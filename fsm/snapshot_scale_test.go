package fsm

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// BenchmarkSnapshotScale writes and restores large states built by
// benchHistoryState: 8 GPUs a host, background allocations, a history of
// ended one-GPU allocations. "capture" is what Raft's Snapshot does under
// the state's lock, "digest" what the state hash does under it; "write"
// encodes and writes the whole snapshot, "restore" reads it back whole.
// The restore case also reports the resident memory of a process that
// holds only the restored state, and the times of restores in fresh
// processes (restoreFresh).
//
//	go test -run '^$' -bench SnapshotScale -benchtime 5x -timeout 60m ./fsm/
func BenchmarkSnapshotScale(b *testing.B) {
	for _, size := range []struct{ hosts, history int }{{1250, 100000}, {12500, 1000000}} {
		h := benchHistoryState(b, size.hosts, size.history)
		s := h.s
		snap := s.SnapshotBytes()
		name := fmt.Sprintf("devices=%d/history=%d", size.hosts*8, size.history)
		b.Run("capture/"+name, func(b *testing.B) {
			loopMedian(b, func() error { _, err := s.CaptureSnapshot(); return err })
		})
		b.Run("digest/"+name, func(b *testing.B) {
			loopMedian(b, func() error { return s.WriteDigest(io.Discard) })
		})
		b.Run("write/"+name, func(b *testing.B) {
			b.SetBytes(int64(len(snap)))
			loopMedian(b, func() error { return s.Snapshot(io.Discard) })
		})
		b.Run("restore/"+name, func(b *testing.B) { benchRestore(b, snap, size.history) })
	}
}

// BenchmarkSnapshotHead times what the FSM's read lock is held for at
// 100,000 devices (12,500 hosts, 37,500 live allocations, no history):
// Raft's Snapshot capturing the head ("capture"), the state hash's
// digest ("digest"), and a capture after 16 commands that each placed
// or released a GPU ("capture-churn": the records of what they changed
// are encoded again). The first capture, which encodes every record,
// runs before the timing.
//
//	go test -run '^$' -bench 'SnapshotHead' -benchtime 20x -count 5 ./fsm/
func BenchmarkSnapshotHead(b *testing.B) {
	h := benchStatsState(b, 12500)
	s := h.s
	if _, err := s.CaptureSnapshot(); err != nil {
		b.Fatal(err)
	}
	b.Run("capture", func(b *testing.B) {
		loopMedian(b, func() error { _, err := s.CaptureSnapshot(); return err })
	})
	b.Run("digest", func(b *testing.B) {
		loopMedian(b, func() error { return s.WriteDigest(io.Discard) })
	})
	b.Run("capture-churn", func(b *testing.B) {
		var live []string
		churn := func() {
			for range 8 {
				if r := h.apply(gpuReq(16)); r.Err == nil {
					live = append(live, r.Allocation.ID)
				}
				if len(live) > 0 {
					h.apply(&Release{AllocationID: live[0]})
					live = live[1:]
				}
			}
		}
		loopMedianAfter(b, churn, func() error { _, err := s.CaptureSnapshot(); return err })
	})
}

// BenchmarkSnapshotCommands restores, as BenchmarkSnapshotScale does, a
// state of 100,000 devices whose million history records were built by
// commands (allocate and release of one GPU, BenchmarkMemory's request)
// rather than filed by benchHistoryState. Building it takes a minute or
// two.
//
//	go test -run '^$' -bench SnapshotCommands -benchtime 5x -timeout 60m ./fsm/
func BenchmarkSnapshotCommands(b *testing.B) {
	const records = 1000000
	h := benchStatsState(b, 12500)
	h.apply(&SetRetention{Retention: Retention{MaxCount: records, MaxAge: DefaultRetention.MaxAge}})
	for h.s.history.len() < records {
		r := h.apply(&Allocate{Request: Request{Claims: []Claim{gpuClaim(8, 1)}}})
		if r.Err != nil {
			b.Fatal(r.Err)
		}
		if r := h.apply(&Release{AllocationID: r.Allocation.ID}); r.Err != nil {
			b.Fatal(r.Err)
		}
	}
	snap := h.s.SnapshotBytes()
	b.Run("restore/devices=100000/history=1000000", func(b *testing.B) { benchRestore(b, snap, records) })
}

// benchRestore times restores of snap, a snapshot of records history
// records, and reports the snapshot's bytes per record and, from
// restores in fresh processes as a server starting from a snapshot
// makes (restoreFresh), their median times and the resident memory of a
// process that holds only the restored state.
func benchRestore(b *testing.B, snap []byte, records int) {
	b.SetBytes(int64(len(snap)))
	loopMedian(b, func() error { _, err := Restore(bytes.NewReader(snap)); return err })
	b.StopTimer()
	b.ReportMetric(float64(len(snap))/float64(records), "snapshot-B/history-record")
	// A server restores with the agent's garbage collector target
	// (cmd/dmsc tuneGC: GOGC=400 unless GOGC is set); Go's default is
	// reported beside it.
	f := restoreFresh(b, snap, 5, cmp.Or(os.Getenv("GOGC"), "400"))
	b.ReportMetric(float64(f.wall.Milliseconds()), "fresh-median-ms")
	b.ReportMetric(float64(f.cpu.Milliseconds()), "fresh-median-cpu-ms")
	b.ReportMetric(float64(f.rss)/(1<<20), "restored-RSS-MiB")
	b.ReportMetric(float64(f.peak)/(1<<20), "restore-peak-RSS-MiB")
	g := restoreFresh(b, snap, 5, "100")
	b.ReportMetric(float64(g.wall.Milliseconds()), "fresh-gogc100-median-ms")
	b.ReportMetric(float64(g.cpu.Milliseconds()), "fresh-gogc100-median-cpu-ms")
}

// loopMedian runs f as the benchmark's loop and reports the median of
// its iterations as well as the mean (with -benchtime 5x, the median of 5
// from one setup of a state that takes minutes to build), in wall time
// and in the process's CPU time (GC included).
func loopMedian(b *testing.B, f func() error) { loopMedianAfter(b, nil, f) }

// loopMedianAfter is loopMedian with prepare, when not nil, run before
// each iteration and timed by neither figure.
func loopMedianAfter(b *testing.B, prepare func(), f func() error) {
	var wall, cpu []time.Duration
	for b.Loop() {
		if prepare != nil {
			b.StopTimer()
			prepare()
			b.StartTimer()
		}
		start, c0 := time.Now(), processCPU()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		wall = append(wall, time.Since(start))
		cpu = append(cpu, processCPU()-c0)
	}
	median := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2]) / 1e6
	}
	b.ReportMetric(median(wall), "median-ms")
	b.ReportMetric(median(cpu), "median-cpu-ms")
}

// freshRestore is what restoreFresh measured: the median wall and CPU
// time of the restores, and the resident memory (after a GC) and its
// peak of the process of the median wall time, each once restored.
type freshRestore struct {
	wall, cpu time.Duration
	rss, peak int64
}

// restoreFresh restores snap in n child processes with GOGC=gogc, one
// after the other, each doing nothing else (TestRestoreRSSChild), and
// returns their medians. Its RSS figures are VmRSS and VmHWM of
// /proc/self/status (zero where there is no /proc).
func restoreFresh(b *testing.B, snap []byte, n int, gogc string) freshRestore {
	path := b.TempDir() + "/snap"
	if err := os.WriteFile(path, snap, 0o600); err != nil {
		b.Fatal(err)
	}
	var runs []freshRestore
	var cpus []time.Duration
	for range n {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRestoreRSSChild$", "-test.v")
		cmd.Env = append(os.Environ(), "DMSC_RESTORE_RSS_SNAPSHOT="+path, "GOGC="+gogc)
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Fatalf("child: %v\n%s", err, out)
		}
		var r freshRestore
		for _, line := range strings.Split(string(out), "\n") {
			switch f := strings.Fields(line); {
			case len(f) == 3 && f[0] == "restore-rss":
				r.rss, _ = strconv.ParseInt(f[1], 10, 64)
				r.peak, _ = strconv.ParseInt(f[2], 10, 64)
			case len(f) == 5 && f[0] == "restore-time":
				r.wall, _ = time.ParseDuration(f[2])
				r.cpu, _ = time.ParseDuration(f[4])
			}
		}
		runs = append(runs, r)
		cpus = append(cpus, r.cpu)
	}
	slices.SortFunc(runs, func(x, y freshRestore) int { return cmp.Compare(x.wall, y.wall) })
	slices.Sort(cpus)
	m := runs[n/2]
	m.cpu = cpus[n/2]
	return m
}

// TestRestoreRSSChild is restoreFresh's child; it does nothing unless
// DMSC_RESTORE_RSS_SNAPSHOT names a snapshot file. Run by hand on a
// snapshot file, it prints the restore's times and memory.
func TestRestoreRSSChild(t *testing.T) {
	path := os.Getenv("DMSC_RESTORE_RSS_SNAPSHOT")
	if path == "" {
		t.Skip("run by BenchmarkSnapshotScale")
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	start, c0 := time.Now(), processCPU()
	s, err := Restore(f)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("restore-time wall %v cpu %v\n", time.Since(start), processCPU()-c0)
	runtime.GC()
	rss, peak := procStatus("VmRSS:"), procStatus("VmHWM:")
	runtime.KeepAlive(s)
	fmt.Printf("restore-rss %d %d\n", rss, peak)
}

// procStatus reads a size in kB from /proc/self/status, in bytes.
func procStatus(key string) int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
