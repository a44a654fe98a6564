package fsm_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

var seedFlag = flag.Int64("seed", 0, "seed of the randomized command log (0: $DMSC_SEED, else the fixed default)")

// defaultSeed makes the default run (and CI) replay one known log; set
// DMSC_SEED=random (or any number) to explore others.
const defaultSeed = 20261129

// logSeed is the seed of TestRandomLog: -seed, else DMSC_SEED (a number, or
// "random" for one derived from the clock), else defaultSeed.
func logSeed(t *testing.T) int64 {
	if *seedFlag != 0 {
		return *seedFlag
	}
	if v := os.Getenv("DMSC_SEED"); v == "random" {
		return time.Now().UnixNano()
	} else if v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("DMSC_SEED=%q: %v", v, err)
		}
		return n
	}
	return defaultSeed
}

// restorePoints is how many replicas TestRandomLog restores from snapshots
// of the primary along the log.
const restorePoints = 3

// randomLogStart is the leader time the random log starts from.
var randomLogStart = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// TestRandomLog applies a long random log of every kind of command, good and
// bad, and checks after each one that the state holds together (by
// CheckInvariants and, independently, through the public read API), that
// every command had the outcome it should, that a second replica and
// replicas restored from snapshots along the way give identical results and
// snapshots, and that a repeated request ID changes nothing.
func TestRandomLog(t *testing.T) {
	seed := logSeed(t)
	t.Logf("seed %d (rerun with -seed %d or DMSC_SEED=%d)", seed, seed, seed)
	n := 10000
	if testing.Short() {
		n = 2000
	}
	rng := rand.New(rand.NewSource(seed))
	g := newCmdGen(rng)

	primary, second := fsm.New(), fsm.New()
	// Replicas restored from a snapshot of the primary at these points
	// apply the rest of the log alongside it.
	restoreAt := map[int]bool{}
	for k := 1; k <= restorePoints; k++ {
		restoreAt[n*k/(restorePoints+1)-rng.Intn(n/10)] = true
	}
	type replica struct {
		s    *fsm.State
		from int
	}
	var replicas []replica
	stats := map[string]int{}

	fail := func(i int, st *step, format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d, command %d (%s): %s", seed, i+1, st.kind, fmt.Sprintf(format, args...))
	}
	view := observe(primary)
	for i := 0; i < n; i++ {
		idx := uint64(i + 1)
		st := g.next(primary, view)
		if strings.HasPrefix(st.kind, "retry") {
			stats["retry"]++
		} else {
			stats[strings.TrimPrefix(st.kind, "reused id, ")]++
		}

		raw, encErr := fsm.Encode(st.cmd)
		if st.unencodable {
			if !errors.Is(encErr, fsm.ErrInvalid) {
				fail(i, &st, "encoding a command with NaN or Inf gave %v, want ErrInvalid", encErr)
			}
		} else if encErr != nil {
			fail(i, &st, "encode: %v", encErr)
		}
		// decoded returns a fresh copy of the command for each replica, so
		// no two states share a map or slice of a command.
		checked := false
		decoded := func() fsm.Command {
			if st.unencodable {
				return st.cmd
			}
			c, err := fsm.Decode(raw)
			if err != nil {
				fail(i, &st, "decode: %v", err)
			}
			if !checked {
				checked = true
				if again, err := fsm.Encode(c); err != nil || !bytes.Equal(again, raw) {
					fail(i, &st, "decode then encode changed the command: %v\n%s\n%s", err, raw, again)
				}
			}
			return c
		}

		hit, expectHit := g.expectHit(&st, primary)
		// A snapshot costs more than the rest of a step: every repeated
		// request ID and one bad command in sixteen are checked for changing
		// nothing (badinput_test.go checks every kind of bad command).
		var before []byte
		compareState := expectHit || (st.bad && rng.Intn(16) == 0)
		if compareState {
			before = primary.SnapshotBytes()
		}
		res := primary.Apply(idx, decoded())
		resJSON := resultJSON(res)
		if got := resultJSON(second.Apply(idx, decoded())); !bytes.Equal(got, resJSON) {
			fail(i, &st, "second replica gave another result:\n%s\n%s", resJSON, got)
		}
		for _, r := range replicas {
			if got := resultJSON(r.s.Apply(idx, decoded())); !bytes.Equal(got, resJSON) {
				fail(i, &st, "replica restored after command %d gave another result:\n%s\n%s", r.from, resJSON, got)
			}
		}

		if err := primary.CheckInvariants(); err != nil {
			fail(i, &st, "invariant violated: %v", err)
		}
		fresh := res.Index == idx
		prevView := view
		view = observe(primary)
		if err := view.check(st.cmd.Type() == fsm.TickType && fresh); err != nil {
			fail(i, &st, "public view: %v", err)
		}

		switch {
		case expectHit:
			stats["request id repeated"]++
			if err := hit.matches(res, primary); err != nil {
				fail(i, &st, "repeated request ID %q: %v", fsm.RequestIDOf(st.cmd), err)
			}
			if after := primary.SnapshotBytes(); !bytes.Equal(before, after) {
				fail(i, &st, "repeated request ID %q changed the state", fsm.RequestIDOf(st.cmd))
			}
		case !fresh && !st.anyOutcome:
			fail(i, &st, "request ID %q was not expected to be known, but the result is that of command %d", fsm.RequestIDOf(st.cmd), res.Index)
		case st.bad:
			if !errors.Is(res.Err, st.want) {
				fail(i, &st, "got %v, want %s", res.Err, st.want.Code)
			}
			if compareState && !bytes.Equal(before, primary.SnapshotBytes()) {
				fail(i, &st, "refused command changed the state")
			}
		default:
			outcome, err := checkOutcome(&st, res, view, primary)
			if err != nil {
				fail(i, &st, "%v", err)
			}
			stats[outcome]++
		}
		for _, k := range view.transitions(prevView, primary) {
			stats[k]++
		}
		if res.Err != nil {
			stats["error "+res.Err.(*fsm.Error).Code]++
		}
		g.learn(&st, idx, res, primary)

		if restoreAt[i+1] {
			snap := primary.SnapshotBytes()
			r, err := fsm.Restore(bytes.NewReader(snap))
			if err != nil {
				fail(i, &st, "restore: %v", err)
			}
			if got := r.SnapshotBytes(); !bytes.Equal(got, snap) {
				fail(i, &st, "restored state writes another snapshot")
			}
			replicas = append(replicas, replica{s: r, from: i + 1})
		}
		if (i+1)%1000 == 0 || i == n-1 {
			snap := primary.SnapshotBytes()
			if !bytes.Equal(second.SnapshotBytes(), snap) {
				fail(i, &st, "replicas that applied the same log write different snapshots")
			}
			for _, r := range replicas {
				if !bytes.Equal(r.s.SnapshotBytes(), snap) {
					fail(i, &st, "replica restored after command %d writes another snapshot", r.from)
				}
			}
		}
	}
	if len(replicas) != restorePoints {
		t.Fatalf("seed %d: %d restore points, want %d", seed, len(replicas), restorePoints)
	}
	stats["live at the end"] = len(primary.Live())
	keys := make([]string, 0, len(stats))
	for k := range stats {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %-34s %6d", k, stats[k])
	}
	t.Logf("seed %d: %d commands, %d B final snapshot:%s", seed, n, len(primary.SnapshotBytes()), b.String())
	if testing.Short() {
		return // a short log may miss rare outcomes such as preemption
	}
	// The log must have reached what it is meant to exercise.
	for _, k := range []string{"request id repeated", "error invalid_argument", "error not_found",
		"error not_active", "error conflict", "error no_capacity", "outcome active", "outcome queued",
		"outcome failed", "outcome preempting", "served from queue", "ended released", "ended lost",
		"ended expired", "ended timed_out", "ended preempted", "ended cancelled"} {
		if stats[k] == 0 {
			t.Errorf("seed %d: the log never reached %q", seed, k)
		}
	}
}

// resultJSON encodes a result, error code included, for comparison.
func resultJSON(r fsm.Result) []byte {
	out := struct {
		Index      uint64          `json:"index"`
		Allocation *fsm.Allocation `json:"allocation,omitempty"`
		Err        *fsm.Error      `json:"err,omitempty"`
	}{Index: r.Index, Allocation: r.Allocation}
	if r.Err != nil {
		var e *fsm.Error
		if !errors.As(r.Err, &e) {
			e = &fsm.Error{Code: "not an *fsm.Error", Message: r.Err.Error()}
		}
		out.Err = e
	}
	b, err := json.Marshal(out)
	if err != nil {
		return []byte("unencodable result: " + err.Error())
	}
	return b
}

// step is one generated command and what it should do.
type step struct {
	cmd  fsm.Command
	kind string
	// bad commands must be refused with want and change nothing.
	bad  bool
	want *fsm.Error
	// unencodable commands carry NaN or Inf, which the codec refuses;
	// they are applied as they are.
	unencodable bool
	// anyOutcome: the generator does not know what the command will do.
	anyOutcome bool
}

// cachedRequest is the first accepted result of a request ID.
type cachedRequest struct {
	index   uint64
	allocID string
	code    string
	at      int64 // state time after the command
	raw     []byte
}

// matches reports whether res is the result cached for the request ID.
func (c cachedRequest) matches(res fsm.Result, s *fsm.State) error {
	if res.Index != c.index {
		return fmt.Errorf("result of command %d, want that of command %d", res.Index, c.index)
	}
	code := ""
	if res.Err != nil {
		code = res.Err.(*fsm.Error).Code
	}
	if code != c.code {
		return fmt.Errorf("error %q, first result had %q", code, c.code)
	}
	switch {
	case res.Allocation != nil && res.Allocation.ID != c.allocID:
		return fmt.Errorf("allocation %s, first result had %q", res.Allocation.ID, c.allocID)
	case res.Allocation == nil && c.allocID != "":
		if _, ok := s.Allocation(c.allocID); ok {
			return fmt.Errorf("no allocation, first result had %s which still exists", c.allocID)
		}
	}
	return nil
}

// cmdGen generates commands from what it sees of the state.
type cmdGen struct {
	rng     *rand.Rand
	now     int64
	nextDev int
	nextReq int
	// hosts holds the devices last registered per host, as sent.
	hosts      map[string][]fsm.DeviceSpec
	hostLabels map[string]map[string]string
	// allocIDs are allocation IDs seen in results, newest last.
	allocIDs []string
	// cached are request IDs whose first result the state keeps.
	cached     map[string]cachedRequest
	cachedList []string
	// refusedIDs were used only on refused commands: not remembered.
	refusedIDs []string
	everCached map[string]bool
	// shapes are the typical claims of requests.
	shapes [][]fsm.Claim
}

func newCmdGen(rng *rand.Rand) *cmdGen {
	return &cmdGen{rng: rng, now: randomLogStart, hosts: map[string][]fsm.DeviceSpec{},
		hostLabels: map[string]map[string]string{}, cached: map[string]cachedRequest{}, everCached: map[string]bool{}}
}

func (g *cmdGen) chance(percent int) bool { return g.rng.Intn(100) < percent }

func pick[T any](g *cmdGen, list ...T) T { return list[g.rng.Intn(len(list))] }

var hostUniverse = []string{"host-a", "host-b", "host-c", "host-d", "host-e", "host-f", "host-g", "host-h", "host-i", "host-j"}

// requestCacheSafeAge is an age at which a request ID is surely still
// remembered (the state keeps them much longer).
const requestCacheSafeAge = int64(time.Hour)

// next generates the next command.
func (g *cmdGen) next(s *fsm.State, v *publicView) step {
	g.now += int64(g.rng.Intn(500)) * int64(time.Millisecond)
	var st step
	r := g.rng.Intn(1000)
	switch {
	case r < 330:
		st = g.allocate(v)
	case r < 450:
		st = g.release(s, v)
	case r < 500:
		st = g.renew(s, v)
	case r < 540:
		st = g.cancel(s, v)
	case r < 650:
		st = g.tick()
	case r < 710:
		st = g.setDeviceStatus(v)
	case r < 760:
		st = g.setHostStatus(v)
	case r < 820:
		st = g.registerHost()
	case r < 835:
		st = g.removeHost(v)
	case r < 875:
		st = g.setPolicy()
	case r < 885:
		st = g.setRetention()
	default:
		st = g.badCommand(s, v)
	}
	at := g.now
	if g.chance(1) {
		// A stale leader time: the clock does not go back.
		at -= int64(g.rng.Intn(10000)) * int64(time.Millisecond)
	}
	fsm.Stamp(st.cmd, time.Unix(0, at))

	switch {
	case g.chance(3) && len(g.cachedList) > 0:
		id := g.cachedList[g.rng.Intn(len(g.cachedList))]
		c := g.cached[id]
		if cmd, err := fsm.Decode(c.raw); err == nil && g.chance(50) {
			// The same command again, as a client retry sends it.
			st = step{cmd: cmd, kind: fmt.Sprintf("retry of command %d", c.index)}
			fsm.Stamp(st.cmd, time.Unix(0, at))
		} else {
			st.kind = "reused id, " + st.kind
		}
		fsm.SetRequestID(st.cmd, id)
	case g.chance(3) && len(g.refusedIDs) > 0:
		// An ID used only by refused commands is not remembered: this
		// command runs as new.
		id := g.refusedIDs[g.rng.Intn(len(g.refusedIDs))]
		if !g.everCached[id] {
			fsm.SetRequestID(st.cmd, id)
		}
	case g.chance(20):
		g.nextReq++
		fsm.SetRequestID(st.cmd, "req-"+strconv.Itoa(g.nextReq))
	}
	return st
}

// expectHit reports whether the command's request ID is surely known.
func (g *cmdGen) expectHit(st *step, s *fsm.State) (cachedRequest, bool) {
	id := fsm.RequestIDOf(st.cmd)
	if id == "" {
		return cachedRequest{}, false
	}
	c, ok := g.cached[id]
	if !ok {
		return cachedRequest{}, false
	}
	if s.Now().UnixNano()-c.at > requestCacheSafeAge {
		// It may or may not have been forgotten: the outcome is open.
		st.anyOutcome, st.bad = true, false
		return c, false
	}
	return c, true
}

// learn records what a command did for later commands to use.
func (g *cmdGen) learn(st *step, idx uint64, res fsm.Result, s *fsm.State) {
	if res.Index != idx {
		return
	}
	if res.Allocation != nil {
		g.allocIDs = append(g.allocIDs, res.Allocation.ID)
		if len(g.allocIDs) > 400 {
			g.allocIDs = append(g.allocIDs[:0], g.allocIDs[200:]...)
		}
	}
	if res.Err == nil {
		switch c := st.cmd.(type) {
		case *fsm.RegisterHost:
			g.hosts[c.Host.ID] = append([]fsm.DeviceSpec(nil), c.Devices...)
			g.hostLabels[c.Host.ID] = c.Host.Labels
		case *fsm.RemoveHost:
			delete(g.hosts, c.HostID)
		}
	}
	id := fsm.RequestIDOf(st.cmd)
	if id == "" {
		return
	}
	code := ""
	if res.Err != nil {
		code = res.Err.(*fsm.Error).Code
		if code != fsm.ErrNoCapacity.Code {
			g.refusedIDs = append(g.refusedIDs, id)
			return
		}
	}
	c := cachedRequest{index: idx, code: code, at: s.Now().UnixNano()}
	if res.Allocation != nil {
		c.allocID = res.Allocation.ID
	}
	if !st.unencodable {
		c.raw, _ = fsm.Encode(st.cmd)
	}
	if _, ok := g.cached[id]; !ok {
		g.cachedList = append(g.cachedList, id)
	}
	g.everCached[id] = true
	g.cached[id] = c
	// Keep reusing recent IDs only.
	if len(g.cachedList) > 200 {
		for _, old := range g.cachedList[:100] {
			delete(g.cached, old)
		}
		g.cachedList = append(g.cachedList[:0], g.cachedList[100:]...)
	}
}

// Devices.

func (g *cmdGen) device(hostID string) fsm.DeviceSpec {
	g.nextDev++
	d := fsm.DeviceSpec{ID: fmt.Sprintf("%s-d%04d", hostID, g.nextDev), Pool: pick(g, "", "", "", "p1", "p2", "default")}
	switch r := g.rng.Intn(100); {
	case r < 45:
		d.Type = fsm.GPU
		model := pick(g, "a100", "h100", "l4")
		d.Name = model
		d.Capabilities = fsm.Capabilities{
			Resources: fsm.Resources{MemoryGB: pick(g, 16.0, 24, 40, 80), ComputeUnits: pick(g, 50.0, 100)},
			Custom:    map[string]string{"model": model},
		}
		d.Shareable = g.chance(30)
	case r < 65:
		d.Type = fsm.CPU
		d.Capabilities.ComputeUnits = pick(g, 8.0, 16, 32, 64)
		d.Shareable = g.chance(80)
	case r < 80:
		d.Type = fsm.Memory
		d.Capabilities.MemoryGB = pick(g, 64.0, 128, 256)
		d.Shareable = g.chance(80)
	case r < 87:
		d.Type = fsm.Storage
		d.Capabilities.StorageGB = pick(g, 500.0, 1000)
		d.Capabilities.BandwidthGbps = pick(g, 0, 2.5)
		d.Shareable = g.chance(50)
	case r < 93:
		d.Type = fsm.Network
		d.Capabilities.BandwidthGbps = pick(g, 10.0, 25, 100)
		d.Shareable = g.chance(50)
	default:
		d.Type = pick(g, fsm.Sensor, fsm.Actuator, fsm.Custom)
		if !g.chance(30) {
			d.Capabilities.ComputeUnits = pick(g, 1.0, 2, 0.3)
		}
		d.Shareable = g.chance(40)
	}
	if g.chance(5) {
		// Capacities that are not sums of powers of two.
		d.Capabilities.ComputeUnits += 0.1
	}
	if g.chance(40) {
		d.Labels = map[string]string{"zone": pick(g, "z1", "z2")}
	}
	if g.chance(20) {
		if d.Labels == nil {
			d.Labels = map[string]string{}
		}
		d.Labels["tier"] = "fast"
	}
	return d
}

// changed returns the device with a different spec under the same ID.
func (g *cmdGen) changed(d fsm.DeviceSpec) fsm.DeviceSpec {
	switch g.rng.Intn(3) {
	case 0:
		d.Capabilities.Resources.ComputeUnits++
	case 1:
		d.Shareable = !d.Shareable
	default:
		d.Labels = map[string]string{"zone": pick(g, "z1", "z2", "z3")}
	}
	return d
}

func (g *cmdGen) freshDevices(hostID string) []fsm.DeviceSpec {
	n := g.rng.Intn(9)
	out := make([]fsm.DeviceSpec, n)
	for i := range out {
		out[i] = g.device(hostID)
	}
	return out
}

func (g *cmdGen) hostLabelsFor(hostID string) map[string]string {
	if old, ok := g.hostLabels[hostID]; ok && g.chance(80) {
		return old
	}
	if g.chance(30) {
		return map[string]string{"rack": pick(g, "r1", "r2")}
	}
	return nil
}

func (g *cmdGen) registerHost() step {
	hostID := pick(g, hostUniverse...)
	old, known := g.hosts[hostID]
	kind := "register host"
	var devs []fsm.DeviceSpec
	if known && g.chance(75) {
		kind = "update host"
		for _, d := range old {
			switch r := g.rng.Intn(10); {
			case r < 6:
				devs = append(devs, d)
			case r < 8:
				devs = append(devs, g.changed(d))
			}
		}
		for g.chance(30) {
			devs = append(devs, g.device(hostID))
		}
		g.rng.Shuffle(len(devs), func(i, j int) { devs[i], devs[j] = devs[j], devs[i] })
	} else {
		devs = g.freshDevices(hostID)
	}
	return step{kind: kind, cmd: &fsm.RegisterHost{Host: fsm.HostSpec{ID: hostID, Labels: g.hostLabelsFor(hostID)}, Devices: devs}}
}

func (g *cmdGen) removeHost(v *publicView) step {
	if len(v.hosts) == 0 {
		return g.tick()
	}
	h := v.hosts[g.rng.Intn(len(v.hosts))]
	return step{kind: "remove host", cmd: &fsm.RemoveHost{HostID: h.ID}}
}

func (g *cmdGen) setHostStatus(v *publicView) step {
	if len(v.hosts) == 0 {
		return g.tick()
	}
	h := v.hosts[g.rng.Intn(len(v.hosts))]
	up := g.chance(55)
	return step{kind: fmt.Sprintf("set host up=%t", up), cmd: &fsm.SetHostStatus{HostID: h.ID, Up: up}}
}

func (g *cmdGen) setDeviceStatus(v *publicView) step {
	if len(v.devs) == 0 {
		return g.tick()
	}
	d := v.devs[g.rng.Intn(len(v.devs))]
	st := pick(g, fsm.Available, fsm.Available, fsm.Draining, fsm.Unhealthy)
	return step{kind: "set device " + string(st), cmd: &fsm.SetDeviceStatus{DeviceID: d.ID, Status: st}}
}

// Requests.

func (g *cmdGen) threshold(t fsm.DeviceType) fsm.Resources {
	switch t {
	case fsm.GPU:
		return fsm.Resources{MemoryGB: pick(g, 8.0, 16, 24, 40, 80, 120)}
	case fsm.CPU:
		return fsm.Resources{ComputeUnits: pick(g, 4.0, 16, 32, 64)}
	case fsm.Memory:
		return fsm.Resources{MemoryGB: pick(g, 32.0, 128, 256)}
	case fsm.Storage:
		return fsm.Resources{StorageGB: pick(g, 250.0, 1000)}
	case fsm.Network:
		return fsm.Resources{BandwidthGbps: pick(g, 10.0, 50)}
	}
	return fsm.Resources{ComputeUnits: pick(g, 1.0, 2)}
}

func (g *cmdGen) amount(t fsm.DeviceType) fsm.Resources {
	var r fsm.Resources
	switch t {
	case fsm.GPU:
		r = fsm.Resources{MemoryGB: pick(g, 4.0, 8, 12, 16, 20), ComputeUnits: pick(g, 0, 10.0, 25, 50)}
	case fsm.CPU:
		r = fsm.Resources{ComputeUnits: pick(g, 0.5, 1, 2, 4, 8, 16)}
	case fsm.Memory:
		r = fsm.Resources{MemoryGB: pick(g, 1.0, 4, 16, 64)}
	case fsm.Storage:
		r = fsm.Resources{StorageGB: pick(g, 50.0, 100, 400)}
	case fsm.Network:
		r = fsm.Resources{BandwidthGbps: pick(g, 1.0, 5, 10)}
	default:
		r = fsm.Resources{ComputeUnits: pick(g, 0.25, 1)}
	}
	if g.chance(5) {
		r.ComputeUnits += pick(g, 0.1, 1.0/3)
	}
	return r
}

func (g *cmdGen) claim(v *publicView) fsm.Claim {
	t := pick(g, fsm.DeviceTypes...)
	if len(v.devs) > 0 && g.chance(90) {
		t = v.devs[g.rng.Intn(len(v.devs))].Type
	}
	c := fsm.Claim{Type: t, Count: pick(g, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4)}
	if g.chance(35) {
		c.Capabilities.Resources = g.threshold(t)
	}
	if t == fsm.GPU && g.chance(15) {
		c.Capabilities.Custom = map[string]string{"model": pick(g, "a100", "h100", "a100|h100", "l4|h100")}
	}
	if g.chance(55) {
		c.Amount = g.amount(t)
	}
	if g.chance(10) {
		c.Pool = pick(g, "p1", "p2", "default")
	}
	return c
}

// shapeMenuSize is how many request shapes (claims) a log mostly draws
// from: a workload has typical shapes, which FragmentationAware learns.
const shapeMenuSize = 24

func (g *cmdGen) request(v *publicView) fsm.Request {
	r := fsm.Request{
		Priority: pick(g, 0, 10, 50, 100, 500, 895, 900, 1000, g.rng.Intn(fsm.MaxPriority+1)),
	}
	if len(g.shapes) < shapeMenuSize || g.chance(3) {
		for n := pick(g, 1, 1, 1, 1, 2, 2, 3); n > 0; n-- {
			r.Claims = append(r.Claims, g.claim(v))
		}
		if len(g.shapes) < shapeMenuSize {
			g.shapes = append(g.shapes, append([]fsm.Claim(nil), r.Claims...))
		}
	} else {
		r.Claims = append([]fsm.Claim(nil), g.shapes[g.rng.Intn(len(g.shapes))]...)
	}
	if g.chance(50) {
		r.Timeout = time.Duration(1+g.rng.Intn(300)) * time.Second
	}
	if g.chance(50) {
		r.LeaseTTL = time.Duration(1+g.rng.Intn(1800)) * time.Second
	}
	if g.chance(10) {
		r.Pool = pick(g, "p1", "p2", "default")
	}
	if g.chance(15) {
		r.Labels.Required = map[string]string{"zone": pick(g, "z1", "z2")}
	}
	if g.chance(20) {
		r.Labels.Preferred = map[string]string{pick(g, "zone", "tier"): pick(g, "z1", "fast")}
	}
	if g.chance(10) {
		r.Labels.Forbidden = map[string]string{"tier": pick(g, "*", "fast")}
	}
	return r
}

func (g *cmdGen) allocate(v *publicView) step {
	c := &fsm.Allocate{Request: g.request(v)}
	if g.chance(7) {
		c.AllocationID = randomUUID(g.rng)
	}
	return step{kind: fmt.Sprintf("allocate %d claims", len(c.Request.Claims)), cmd: c}
}

// randomUUID is a version 4 UUID drawn from rng.
func randomUUID(rng *rand.Rand) string {
	var b [16]byte
	rng.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (g *cmdGen) liveWith(v *publicView, status fsm.AllocStatus) []*fsm.Allocation {
	var out []*fsm.Allocation
	for _, a := range v.live {
		if a.Status == status {
			out = append(out, a)
		}
	}
	return out
}

func (g *cmdGen) release(s *fsm.State, v *publicView) step {
	active := g.liveWith(v, fsm.Active)
	if len(active) == 0 || g.chance(10) {
		return g.badRelease(s, v)
	}
	a := active[g.rng.Intn(len(active))]
	return step{kind: "release", cmd: &fsm.Release{AllocationID: a.ID}}
}

func (g *cmdGen) renew(s *fsm.State, v *publicView) step {
	active := g.liveWith(v, fsm.Active)
	if len(active) == 0 {
		return g.badRelease(s, v)
	}
	a := active[g.rng.Intn(len(active))]
	c := &fsm.Renew{AllocationID: a.ID}
	if a.Request.LeaseTTL == 0 || g.chance(50) {
		c.TTL = time.Duration(1+g.rng.Intn(1800)) * time.Second
	}
	return step{kind: "renew", cmd: c}
}

func (g *cmdGen) cancel(s *fsm.State, v *publicView) step {
	pending := g.liveWith(v, fsm.Pending)
	if len(pending) == 0 {
		return g.badRelease(s, v)
	}
	a := pending[g.rng.Intn(len(pending))]
	return step{kind: "cancel", cmd: &fsm.Cancel{AllocationID: a.ID}}
}

func (g *cmdGen) tick() step {
	switch r := g.rng.Intn(100); {
	case r < 70:
		g.now += int64(g.rng.Intn(5000)) * int64(time.Millisecond)
	case r < 90:
		g.now += int64(5+g.rng.Intn(600)) * int64(time.Second)
	case r < 99:
		g.now += int64(10+g.rng.Intn(110)) * int64(time.Minute)
	default:
		g.now += int64(25 * time.Hour)
	}
	return step{kind: "tick", cmd: &fsm.Tick{}}
}

func (g *cmdGen) setPolicy() step {
	// PriorityBased, the one policy that preempts, comes up half the time.
	pol := pick(g, fsm.Policies...)
	if g.chance(40) {
		pol = fsm.PriorityBased
	}
	c := &fsm.SetPolicy{Config: fsm.PolicyConfig{Policy: pol, PreemptionGap: pick(g, 0, 0, 5, 10, 20, 100)}}
	if g.chance(30) {
		c.Pool = pick(g, "p1", "p2", "default")
		if g.chance(20) {
			c.Config = fsm.PolicyConfig{}
		}
		return step{kind: "set pool policy", cmd: c}
	}
	c.DeviceType = pick(g, fsm.DeviceTypes...)
	return step{kind: "set type policy", cmd: c}
}

func (g *cmdGen) setRetention() step {
	r := fsm.Retention{
		MaxCount: pick(g, 1, 10, 50, 200),
		MaxAge:   pick(g, time.Minute, 10*time.Minute, time.Hour, 24*time.Hour, 7*24*time.Hour),
	}
	return step{kind: "set retention", cmd: &fsm.SetRetention{Retention: r}}
}

// Bad commands: each is refused with a known error and changes nothing.

func badStep(kind string, want *fsm.Error, c fsm.Command) step {
	return step{kind: kind, cmd: c, bad: true, want: want}
}

func (g *cmdGen) badRelease(s *fsm.State, v *publicView) step {
	var ended []string
	for _, id := range g.allocIDs {
		if a, ok := s.Allocation(id); ok && !a.Status.Live() {
			ended = append(ended, id)
		}
	}
	switch r := g.rng.Intn(7); {
	case r == 0 && len(ended) > 0:
		return badStep("release ended", fsm.ErrNotActive, &fsm.Release{AllocationID: pick(g, ended...)})
	case r == 1 && len(ended) > 0:
		return badStep("renew ended", fsm.ErrNotActive, &fsm.Renew{AllocationID: pick(g, ended...)})
	case r == 2 && len(ended) > 0:
		return badStep("cancel ended", fsm.ErrNotActive, &fsm.Cancel{AllocationID: pick(g, ended...)})
	case r == 3:
		if p := g.liveWith(v, fsm.Pending); len(p) > 0 {
			if g.chance(50) {
				return badStep("release pending", fsm.ErrNotActive, &fsm.Release{AllocationID: pick(g, p...).ID})
			}
			return badStep("renew pending", fsm.ErrNotActive, &fsm.Renew{AllocationID: pick(g, p...).ID})
		}
	case r == 4:
		if a := g.liveWith(v, fsm.Active); len(a) > 0 {
			return badStep("cancel active", fsm.ErrConflict, &fsm.Cancel{AllocationID: pick(g, a...).ID})
		}
	case r == 5:
		if a := g.liveWith(v, fsm.Active); len(a) > 0 {
			al := pick(g, a...)
			if al.Request.LeaseTTL == 0 {
				return badStep("renew without ttl", fsm.ErrInvalid, &fsm.Renew{AllocationID: al.ID})
			}
			return badStep("renew negative ttl", fsm.ErrInvalid, &fsm.Renew{AllocationID: al.ID, TTL: -time.Second})
		}
	}
	id := randomUUID(g.rng)
	switch g.rng.Intn(3) {
	case 0:
		return badStep("release unknown", fsm.ErrNotFound, &fsm.Release{AllocationID: id})
	case 1:
		return badStep("renew unknown", fsm.ErrNotFound, &fsm.Renew{AllocationID: id, TTL: time.Second})
	}
	return badStep("cancel unknown", fsm.ErrNotFound, &fsm.Cancel{AllocationID: id})
}

func (g *cmdGen) badAllocate(s *fsm.State, v *publicView) step {
	c := &fsm.Allocate{Request: g.request(v)}
	cl := &c.Request.Claims[g.rng.Intn(len(c.Request.Claims))]
	st := step{cmd: c, bad: true, want: fsm.ErrInvalid}
	switch g.rng.Intn(13) {
	case 0:
		st.kind = "allocate negative amount"
		cl.Amount.MemoryGB = -1
	case 1:
		st.kind = "allocate NaN amount"
		cl.Amount.ComputeUnits = math.NaN()
		st.unencodable = true
	case 2:
		st.kind = "allocate Inf capability"
		cl.Capabilities.MemoryGB = math.Inf(1)
		st.unencodable = true
	case 3:
		st.kind = "allocate negative capability"
		cl.Capabilities.StorageGB = -0.5
	case 4:
		st.kind = "allocate no claims"
		c.Request.Claims = nil
	case 5:
		st.kind = "allocate count 0"
		cl.Count = pick(g, 0, -1, fsm.MaxClaimCount+1)
	case 6:
		st.kind = "allocate priority out of range"
		c.Request.Priority = pick(g, -1, fsm.MaxPriority+1, -1000)
	case 7:
		st.kind = "allocate unknown type"
		cl.Type = pick[fsm.DeviceType](g, "FPGA", "", "gpu")
	case 8:
		st.kind = "allocate negative timeout"
		c.Request.Timeout = -time.Second
	case 9:
		st.kind = "allocate negative lease"
		c.Request.LeaseTTL = -time.Minute
	case 10:
		st.kind = "allocate bad id"
		c.AllocationID = pick(g, "not-a-uuid", strings.ToUpper(randomUUID(g.rng)), "{"+randomUUID(g.rng)+"}")
	case 11:
		st.kind = "allocate too many claims"
		for len(c.Request.Claims) <= fsm.MaxClaims {
			c.Request.Claims = append(c.Request.Claims, c.Request.Claims[0])
		}
	default:
		st.kind = "allocate no claims"
		c.Request.Claims = []fsm.Claim{}
		if len(g.allocIDs) == 0 {
			break
		}
		id := g.allocIDs[len(g.allocIDs)-1-g.rng.Intn(min(len(g.allocIDs), 20))]
		if _, ok := s.Allocation(id); ok {
			st.kind = "allocate existing id"
			st.want = fsm.ErrConflict
			c.Request = g.request(v)
			c.AllocationID = id
		}
	}
	return st
}

func (g *cmdGen) badRegister(v *publicView) step {
	hostID := pick(g, hostUniverse...)
	devs := g.freshDevices(hostID)
	for len(devs) < 2 {
		devs = append(devs, g.device(hostID))
	}
	c := &fsm.RegisterHost{Host: fsm.HostSpec{ID: hostID}, Devices: devs}
	i := g.rng.Intn(len(devs))
	switch r := g.rng.Intn(5); {
	case r == 0:
		dup := g.changed(devs[0])
		c.Devices = append(c.Devices, dup)
		return badStep("register duplicate device", fsm.ErrInvalid, c)
	case r == 1:
		var other []fsm.Device
		for _, d := range v.devs {
			if d.Host != hostID {
				other = append(other, d)
			}
		}
		if len(other) > 0 {
			c.Devices[i] = pick(g, other...).DeviceSpec
			return badStep("register device of another host", fsm.ErrConflict, c)
		}
		c.Host.ID = ""
		return badStep("register empty host id", fsm.ErrInvalid, c)
	case r == 2:
		c.Devices[i].Capabilities.MemoryGB = -16
		return badStep("register negative capability", fsm.ErrInvalid, c)
	case r == 3:
		c.Devices[i].Type = "FPGA"
		return badStep("register unknown type", fsm.ErrInvalid, c)
	}
	c.Devices[i].ID = ""
	return badStep("register device without id", fsm.ErrInvalid, c)
}

func (g *cmdGen) badCommand(s *fsm.State, v *publicView) step {
	switch g.rng.Intn(10) {
	case 0, 1, 2:
		return g.badAllocate(s, v)
	case 3, 4:
		return g.badRelease(s, v)
	case 5:
		return g.badRegister(v)
	case 6:
		if g.chance(50) || len(v.devs) == 0 {
			return badStep("set status of unknown device", fsm.ErrNotFound, &fsm.SetDeviceStatus{DeviceID: "no-such-device", Status: fsm.Draining})
		}
		return badStep("set device offline", fsm.ErrInvalid, &fsm.SetDeviceStatus{DeviceID: pick(g, v.devs...).ID, Status: pick[fsm.DeviceStatus](g, fsm.Offline, "broken", "")})
	case 7:
		if g.chance(50) {
			return badStep("remove unknown host", fsm.ErrNotFound, &fsm.RemoveHost{HostID: "no-such-host"})
		}
		return badStep("set unknown host down", fsm.ErrNotFound, &fsm.SetHostStatus{HostID: "no-such-host"})
	case 8:
		switch g.rng.Intn(4) {
		case 0:
			return badStep("set unknown policy", fsm.ErrInvalid, &fsm.SetPolicy{DeviceType: fsm.GPU, Config: fsm.PolicyConfig{Policy: "Fastest"}})
		case 1:
			return badStep("set unknown pool policy", fsm.ErrInvalid, &fsm.SetPolicy{Pool: "p1", Config: fsm.PolicyConfig{Policy: "firstfit"}})
		case 2:
			return badStep("set policy of unknown type", fsm.ErrInvalid, &fsm.SetPolicy{DeviceType: "FPGA", Config: fsm.PolicyConfig{Policy: fsm.FirstFit}})
		}
		return badStep("set bad preemption gap", fsm.ErrInvalid, &fsm.SetPolicy{DeviceType: fsm.GPU, Config: fsm.PolicyConfig{Policy: fsm.PriorityBased, PreemptionGap: pick(g, -1, fsm.MaxPriority+1)}})
	}
	return badStep("set bad retention", fsm.ErrInvalid, &fsm.SetRetention{Retention: pick(g,
		fsm.Retention{MaxCount: 0, MaxAge: time.Hour},
		fsm.Retention{MaxCount: -5, MaxAge: time.Hour},
		fsm.Retention{MaxCount: 10, MaxAge: 0},
		fsm.Retention{MaxCount: 10, MaxAge: -time.Hour},
		fsm.Retention{MaxCount: fsm.MaxRetentionCount + 1, MaxAge: time.Hour})})
}

// checkOutcome checks what a good command did and names the outcome.
func checkOutcome(st *step, res fsm.Result, v *publicView, s *fsm.State) (string, error) {
	if st.anyOutcome {
		return "outcome open", nil
	}
	c, ok := st.cmd.(*fsm.Allocate)
	if !ok {
		if res.Err != nil {
			return "", fmt.Errorf("refused: %v", res.Err)
		}
		return "outcome ok", nil
	}
	a := res.Allocation
	if res.Err != nil {
		if !errors.Is(res.Err, fsm.ErrNoCapacity) {
			return "", fmt.Errorf("valid request refused: %v", res.Err)
		}
		if c.Request.Timeout != 0 {
			return "", fmt.Errorf("request with a timeout refused instead of queued: %v", res.Err)
		}
		if a == nil || a.Status != fsm.Failed || a.WhyNot == nil {
			return "", fmt.Errorf("refusal for capacity without a failed allocation and a why-not: %+v", a)
		}
		if h := v.fitHost(&c.Request); h != "" {
			return "", fmt.Errorf("refused for capacity, but host %s clearly has room: %s", h, res.Err)
		}
		return "outcome failed", nil
	}
	if a == nil {
		return "", fmt.Errorf("accepted without an allocation")
	}
	if c.AllocationID != "" && a.ID != c.AllocationID {
		return "", fmt.Errorf("allocation id %s, asked for %s", a.ID, c.AllocationID)
	}
	outcome := ""
	switch a.Status {
	case fsm.Active:
		outcome = "outcome active"
	case fsm.Pending:
		outcome = "outcome queued"
		if a.WhyNot == nil {
			return "", fmt.Errorf("pending without a why-not")
		}
		if c.Request.Timeout == 0 {
			return "", fmt.Errorf("request without a timeout queued")
		}
	default:
		return "", fmt.Errorf("new allocation is %s", a.Status)
	}
	if len(a.Preempted) > 0 {
		outcome = "outcome preempting"
		pool := c.Request.Claims[0].Pool
		if pool == "" {
			pool = c.Request.Pool
		}
		pc := s.PolicyOf(c.Request.Claims[0].Type, pool)
		gap := pc.PreemptionGap
		if gap <= 0 {
			gap = fsm.DefaultPreemptionGap
		}
		if pc.Policy != fsm.PriorityBased {
			return "", fmt.Errorf("preempted under policy %s", pc.Policy)
		}
		for _, id := range a.Preempted {
			victim, ok := s.Allocation(id)
			if !ok {
				continue // already left the history
			}
			if victim.Status != fsm.Preempted || victim.PreemptedBy != a.ID {
				return "", fmt.Errorf("victim %s is %s, preempted by %q", id, victim.Status, victim.PreemptedBy)
			}
			if victim.Request.Priority > c.Request.Priority-gap {
				return "", fmt.Errorf("victim %s has priority %d, request %d, gap %d", id, victim.Request.Priority, c.Request.Priority, gap)
			}
		}
	}
	return outcome, nil
}

// publicView is what the public read API shows of a state. Its checks do
// not rely on the code under test beyond those accessors.
type publicView struct {
	now      int64
	hosts    []fsm.Host
	devs     []fsm.Device
	live     []*fsm.Allocation
	queue    []*fsm.Allocation
	hostByID map[string]*fsm.Host
	devByID  map[string]*fsm.Device
	liveByID map[string]*fsm.Allocation
}

func observe(s *fsm.State) *publicView {
	v := &publicView{now: s.Now().UnixNano(), hosts: s.Hosts(), devs: s.Devices(), live: s.Live(), queue: s.Queue(),
		hostByID: map[string]*fsm.Host{}, devByID: map[string]*fsm.Device{}, liveByID: map[string]*fsm.Allocation{}}
	for i := range v.hosts {
		v.hostByID[v.hosts[i].ID] = &v.hosts[i]
	}
	for i := range v.devs {
		v.devByID[v.devs[i].ID] = &v.devs[i]
	}
	for _, a := range v.live {
		v.liveByID[a.ID] = a
	}
	return v
}

// transitions names what happened to the allocations that were live in prev.
func (v *publicView) transitions(prev *publicView, s *fsm.State) []string {
	var out []string
	for _, a := range prev.live {
		now, ok := v.liveByID[a.ID]
		switch {
		case ok && a.Status == fsm.Pending && now.Status == fsm.Active:
			out = append(out, "served from queue")
		case !ok:
			if ended, found := s.Allocation(a.ID); found {
				out = append(out, "ended "+string(ended.Status))
			}
		}
	}
	return out
}

// tolerance absorbs float rounding in sums of amounts.
const tolerance = 1e-6

func resVec(r fsm.Resources) [4]float64 {
	return [4]float64{r.MemoryGB, r.ComputeUnits, r.StorageGB, r.BandwidthGbps}
}

// check verifies the state as the read API shows it. afterTick: a tick was
// just applied, so nothing may be overdue.
func (v *publicView) check(afterTick bool) error {
	for _, h := range v.hosts {
		if !sort.StringsAreSorted(h.Devices) {
			return fmt.Errorf("host %s: devices not sorted", h.ID)
		}
		for _, id := range h.Devices {
			if d := v.devByID[id]; d == nil || d.Host != h.ID {
				return fmt.Errorf("host %s lists device %s that is not its own", h.ID, id)
			}
		}
	}
	used := map[string][4]float64{}
	for _, d := range v.devs {
		h := v.hostByID[d.Host]
		if h == nil {
			return fmt.Errorf("device %s on unknown host %s", d.ID, d.Host)
		}
		if i := sort.SearchStrings(h.Devices, d.ID); i == len(h.Devices) || h.Devices[i] != d.ID {
			return fmt.Errorf("device %s not listed by its host %s", d.ID, d.Host)
		}
		if (d.Status == fsm.Offline) != !h.Up {
			return fmt.Errorf("device %s is %s on a host up=%t", d.ID, d.Status, h.Up)
		}
		caps, u := resVec(d.Capabilities.Resources), resVec(d.Used)
		for k := range caps {
			if math.IsNaN(u[k]) || u[k] < 0 || u[k] > caps[k]+tolerance {
				return fmt.Errorf("device %s: used %+v, capacity %+v", d.ID, d.Used, d.Capabilities.Resources)
			}
		}
		if !d.Shareable && len(d.Allocations) > 1 {
			return fmt.Errorf("exclusive device %s has %d allocations", d.ID, len(d.Allocations))
		}
		if len(d.Allocations) > 0 && d.Status == fsm.Offline {
			return fmt.Errorf("offline device %s has allocations", d.ID)
		}
		for _, id := range d.Allocations {
			if a := v.liveByID[id]; a == nil || a.Status != fsm.Active {
				return fmt.Errorf("device %s lists allocation %s that is not active", d.ID, id)
			}
		}
	}
	for _, a := range v.live {
		switch a.Status {
		case fsm.Pending:
			if len(a.Devices) > 0 || a.Host != "" {
				return fmt.Errorf("pending allocation %s holds devices", a.ID)
			}
			if afterTick && a.Deadline <= v.now {
				return fmt.Errorf("pending allocation %s is past its deadline after a tick", a.ID)
			}
			// A request past its deadline is not placed any more; the
			// next tick times it out.
			if a.Deadline > v.now {
				if h := v.fitHost(&a.Request); h != "" {
					return fmt.Errorf("pending allocation %s (%+v) clearly fits on host %s now", a.ID, a.Request, h)
				}
			}
			continue
		case fsm.Active:
		default:
			return fmt.Errorf("live allocation %s is %s", a.ID, a.Status)
		}
		if afterTick && a.LeaseExpiresAt != 0 && a.LeaseExpiresAt <= v.now {
			return fmt.Errorf("active allocation %s is past its lease after a tick", a.ID)
		}
		h := v.hostByID[a.Host]
		if h == nil || !h.Up {
			return fmt.Errorf("active allocation %s on missing or down host %q", a.ID, a.Host)
		}
		perClaim := make([]int, len(a.Request.Claims))
		inClaim := map[string]bool{}
		for _, as := range a.Devices {
			d := v.devByID[as.DeviceID]
			if d == nil || d.Host != a.Host {
				return fmt.Errorf("allocation %s holds device %s, missing or not on host %s", a.ID, as.DeviceID, a.Host)
			}
			if i := sort.SearchStrings(d.Allocations, a.ID); i == len(d.Allocations) || d.Allocations[i] != a.ID {
				return fmt.Errorf("allocation %s holds device %s, which does not list it", a.ID, d.ID)
			}
			if as.Claim < 0 || as.Claim >= len(perClaim) {
				return fmt.Errorf("allocation %s: assignment to claim %d", a.ID, as.Claim)
			}
			perClaim[as.Claim]++
			key := fmt.Sprintf("%d/%s", as.Claim, d.ID)
			if inClaim[key] {
				return fmt.Errorf("allocation %s takes device %s twice for claim %d", a.ID, d.ID, as.Claim)
			}
			inClaim[key] = true
			cl := &a.Request.Claims[as.Claim]
			if why := staticMismatch(d, &a.Request, as.Claim); why != "" {
				return fmt.Errorf("allocation %s holds device %s that does not meet claim %d: %s", a.ID, d.ID, as.Claim, why)
			}
			whole := !d.Shareable || cl.Amount.IsZero()
			want := cl.Amount
			if whole {
				want = d.Capabilities.Resources
				if len(d.Allocations) != 1 {
					return fmt.Errorf("device %s taken whole by %s has %d allocations", d.ID, a.ID, len(d.Allocations))
				}
			}
			if as.Amount != want {
				return fmt.Errorf("allocation %s takes %+v of device %s, want %+v", a.ID, as.Amount, d.ID, want)
			}
			u := used[d.ID]
			for k, x := range resVec(as.Amount) {
				u[k] += x
			}
			used[d.ID] = u
		}
		for i, n := range perClaim {
			if n != a.Request.Claims[i].Count {
				return fmt.Errorf("allocation %s: claim %d got %d devices, asked %d", a.ID, i, n, a.Request.Claims[i].Count)
			}
		}
	}
	for _, d := range v.devs {
		u, du := used[d.ID], resVec(d.Used)
		for k := range u {
			if math.Abs(u[k]-du[k]) > tolerance {
				return fmt.Errorf("device %s: used %+v, its allocations take %v", d.ID, d.Used, u)
			}
		}
	}
	pending := 0
	for _, a := range v.live {
		if a.Status == fsm.Pending {
			pending++
		}
	}
	if len(v.queue) != pending {
		return fmt.Errorf("queue holds %d, %d allocations pending", len(v.queue), pending)
	}
	for i, a := range v.queue {
		if l := v.liveByID[a.ID]; l == nil || l.Status != fsm.Pending {
			return fmt.Errorf("queue holds %s, which is not pending", a.ID)
		}
		if i > 0 {
			p := v.queue[i-1]
			if p.Request.Priority < a.Request.Priority || (p.Request.Priority == a.Request.Priority && p.Seq > a.Seq) {
				return fmt.Errorf("queue serves %s (priority %d) before %s (priority %d)", p.ID, p.Request.Priority, a.ID, a.Request.Priority)
			}
		}
	}
	return nil
}

// staticMismatch says why device d does not meet claim i of r whatever its
// use, or "".
func staticMismatch(d *fsm.Device, r *fsm.Request, i int) string {
	cl := &r.Claims[i]
	if d.Type != cl.Type {
		return "type"
	}
	pool := cl.Pool
	if pool == "" {
		pool = r.Pool
	}
	if pool != "" && d.Pool != pool {
		return "pool"
	}
	have, want := resVec(d.Capabilities.Resources), resVec(cl.Capabilities.Resources)
	for k := range have {
		if have[k] < want[k] {
			return "capability"
		}
	}
	for k, w := range cl.Capabilities.Custom {
		h, ok := d.Capabilities.Custom[k]
		if !ok || !anyOf(h, w) {
			return "custom " + k
		}
	}
	for k, w := range r.Labels.Required {
		if d.Labels[k] != w {
			return "required label " + k
		}
	}
	for k, w := range r.Labels.Forbidden {
		if h, ok := d.Labels[k]; ok && (w == "*" || h == w) {
			return "forbidden label " + k
		}
	}
	if d.Shareable && !cl.Amount.IsZero() {
		a := resVec(cl.Amount)
		for k := range have {
			if a[k] > have[k] {
				return "amount larger than the device"
			}
		}
	}
	return ""
}

func anyOf(have, want string) bool {
	for _, alt := range strings.Split(want, "|") {
		if alt == have {
			return true
		}
	}
	return false
}

// onGrid reports whether x is a multiple of 1/4, where sums are exact.
func onGrid(x float64) bool { return x*4 == math.Trunc(x*4) }

// clearlyFree reports whether device d can surely take claim i of r now.
func clearlyFree(d *fsm.Device, r *fsm.Request, i int) bool {
	if d.Status != fsm.Available || staticMismatch(d, r, i) != "" {
		return false
	}
	cl := &r.Claims[i]
	if !d.Shareable || cl.Amount.IsZero() {
		return len(d.Allocations) == 0
	}
	caps, used, amt := resVec(d.Capabilities.Resources), resVec(d.Used), resVec(cl.Amount)
	for k := range caps {
		slack := caps[k] - used[k] - amt[k]
		exact := onGrid(caps[k]) && onGrid(used[k]) && onGrid(amt[k])
		if slack < 0 || (!exact && slack < tolerance) {
			return false
		}
	}
	return true
}

// fitHost returns a host on which the request surely fits now, or "". It
// judges only requests whose claims are of different types (claims of one
// type compete for devices, which this oracle does not model).
func (v *publicView) fitHost(r *fsm.Request) string {
	types := map[fsm.DeviceType]bool{}
	for _, c := range r.Claims {
		if types[c.Type] {
			return ""
		}
		types[c.Type] = true
	}
	for _, h := range v.hosts {
		if !h.Up {
			continue
		}
		ok := true
		for i := range r.Claims {
			n := 0
			for _, id := range h.Devices {
				if clearlyFree(v.devByID[id], r, i) {
					n++
				}
			}
			if n < r.Claims[i].Count {
				ok = false
				break
			}
		}
		if ok {
			return h.ID
		}
	}
	return ""
}
