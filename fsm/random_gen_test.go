package fsm_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"strconv"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

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
	// ns is the command's namespace ("" for the default): request IDs
	// are remembered per namespace.
	ns string
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
	// extra draws what later features add to commands (gangs, topology),
	// so that rng's draws, and the logs of its seeds, stay as they were.
	extra *rand.Rand
}

func newCmdGen(rng *rand.Rand) *cmdGen {
	return &cmdGen{rng: rng, extra: rand.New(rand.NewSource(0x5eed)), now: randomLogStart, hosts: map[string][]fsm.DeviceSpec{},
		hostLabels: map[string]map[string]string{}, cached: map[string]cachedRequest{}, everCached: map[string]bool{}}
}

func (g *cmdGen) chance(percent int) bool { return g.rng.Intn(100) < percent }

func pick[T any](g *cmdGen, list ...T) T { return list[g.rng.Intn(len(list))] }

// later and pickLater draw from extra, for what later features add.
func (g *cmdGen) later(percent int) bool { return g.extra.Intn(100) < percent }

func pickLater[T any](g *cmdGen, list ...T) T { return list[g.extra.Intn(len(list))] }

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
	case r < 740:
		st = g.setHostStatus(v)
	case r < 760:
		st = g.drainHost(v)
	case r < 820:
		st = g.registerHost()
	case r < 835:
		st = g.removeHost(v)
	case r < 875:
		st = g.setPolicy()
	case r < 885:
		st = g.setRetention()
	case r < 895:
		st = g.setServerRemoved(s)
	case r < 905:
		st = g.setQuota(s)
	case r < 915:
		st = g.setQueueConfig()
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
			fsm.SetNamespace(st.cmd, c.ns)
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
	if !sameRequest(st.cmd, c.raw) {
		// Another request under a known ID is refused, whatever it is.
		st.bad, st.want, st.anyOutcome = true, fsm.ErrRequestIDReused, false
		st.kind += " (another request)"
		return c, false
	}
	return c, true
}

// sameRequest reports whether a command is the one encoded in raw, but
// for the leader's time and the request ID: a retry of it.
func sameRequest(c fsm.Command, raw []byte) bool {
	canonical := func(c fsm.Command) []byte {
		b, err := fsm.Encode(c)
		if err != nil {
			return nil
		}
		cp, err := fsm.Decode(b)
		if err != nil {
			return nil
		}
		fsm.Stamp(cp, time.Unix(0, 0))
		fsm.SetRequestID(cp, "")
		out, _ := fsm.Encode(cp)
		return out
	}
	orig, err := fsm.Decode(raw)
	if err != nil {
		return false
	}
	a, b := canonical(c), canonical(orig)
	return a != nil && bytes.Equal(a, b)
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
		if code != fsm.ErrNoCapacity.Code && code != fsm.ErrQuotaExceeded.Code {
			g.refusedIDs = append(g.refusedIDs, id)
			return
		}
	}
	c := cachedRequest{index: idx, code: code, at: s.Now().UnixNano()}
	if ns := fsm.NamespaceOf(st.cmd); ns != fsm.DefaultNamespace {
		c.ns = ns
	}
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
	if g.later(35) {
		g.topology(out)
	}
	return out
}

// topology gives a host's devices NUMA nodes and its GPUs links to one
// another: NVLink, PCIe under one or several switches, or across nodes.
func (g *cmdGen) topology(devs []fsm.DeviceSpec) {
	for i := range devs {
		numa := g.extra.Intn(2)
		devs[i].Topology = &fsm.Topology{NUMA: &numa}
	}
	for i := range devs {
		for j := i + 1; j < len(devs); j++ {
			if devs[i].Type != fsm.GPU || devs[j].Type != fsm.GPU {
				continue
			}
			l := pickLater(g, "NV12", "NV4", "PIX", "PXB", "NODE", "SYS")
			for _, ab := range [][2]int{{i, j}, {j, i}} {
				t := devs[ab[0]].Topology
				if t.Links == nil {
					t.Links = map[string]string{}
				}
				t.Links[devs[ab[1]].ID] = l
			}
		}
	}
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

func (g *cmdGen) drainHost(v *publicView) step {
	if len(v.hosts) == 0 {
		return g.tick()
	}
	h := v.hosts[g.rng.Intn(len(v.hosts))]
	c := &fsm.DrainHost{HostID: h.ID, Enable: g.chance(60)}
	if c.Enable && g.chance(70) {
		c.Deadline = time.Duration(g.rng.Intn(20)) * time.Second
		// Most drained hosts hold nothing; half the drains with a
		// deadline go to one that holds an allocation, so that the
		// deadline ends some ("ended drained").
		if len(v.live) > 0 && g.later(50) {
			if a := v.live[g.extra.Intn(len(v.live))]; a.Host != "" {
				c.HostID = a.Host
			}
		}
	}
	return step{kind: fmt.Sprintf("drain host %t", c.Enable), cmd: c}
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
	if t == fsm.GPU && c.Count > 1 && g.later(20) {
		c.Topology = fsm.TopologyNVLink
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
	if g.later(12) {
		// A gang: its first claim over several hosts.
		r.MaxHosts = pickLater(g, 2, 2, 3, 4)
		r.Claims[0].Count = pickLater(g, 2, 3, 4, 5, 6, 8, 12)
		if g.later(30) {
			r.MinPerHost = min(pickLater(g, 1, 2, 3), r.Claims[0].Count)
		}
		if g.later(25) {
			r.Same = "rack"
		}
	} else if g.later(6) {
		r.Host = pickLater(g, hostUniverse...) // dmsc run -here
	}
	return r
}

// namespaces are those of the log's requests; the teams may have quotas.
var namespaces = []string{fsm.DefaultNamespace, fsm.DefaultNamespace, fsm.DefaultNamespace, "team-a", "team-b", "team-c"}

func (g *cmdGen) allocate(v *publicView) step {
	c := &fsm.Allocate{Request: g.request(v)}
	if ns := pick(g, namespaces...); ns != fsm.DefaultNamespace {
		fsm.SetNamespace(c, ns)
	}
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
	return step{kind: "release", cmd: inNamespaceOf(a, &fsm.Release{AllocationID: a.ID})}
}

func (g *cmdGen) renew(s *fsm.State, v *publicView) step {
	active := g.liveWith(v, fsm.Active)
	if len(active) == 0 {
		return g.badRelease(s, v)
	}
	a := active[g.rng.Intn(len(active))]
	c := inNamespaceOf(a, &fsm.Renew{AllocationID: a.ID})
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
	return step{kind: "cancel", cmd: inNamespaceOf(a, &fsm.Cancel{AllocationID: a.ID})}
}

// inNamespaceOf is c acting in a's namespace.
func inNamespaceOf[C fsm.Command](a *fsm.Allocation, c C) C {
	if a.Namespace != fsm.DefaultNamespace {
		fsm.SetNamespace(c, a.Namespace)
	}
	return c
}

// setQuota sets a team's quota (limits on GPUs, in all pools or in p1,
// and on CPU compute units), or deletes it; deleting one that is not
// there is refused.
func (g *cmdGen) setQuota(s *fsm.State) step {
	ns := pick(g, "team-a", "team-b", "team-c")
	if g.chance(20) {
		st := step{kind: "delete quota", cmd: &fsm.SetQuota{Quota: fsm.Quota{Namespace: ns}, Delete: true}}
		if _, ok := s.QuotaOf(ns); !ok {
			st.kind, st.bad, st.want = "delete a quota not set", true, fsm.ErrNotFound
		}
		return st
	}
	n := func(k int) *int { return &k }
	var q fsm.Quota
	q.Namespace = ns
	if g.chance(70) {
		q.Limits = append(q.Limits, fsm.QuotaLimit{DeviceType: fsm.GPU, MaxCount: n(g.rng.Intn(7))})
	}
	if g.chance(40) {
		q.Limits = append(q.Limits, fsm.QuotaLimit{DeviceType: fsm.GPU, Pool: "p1", MaxCount: n(g.rng.Intn(3)),
			MaxAmount: fsm.Resources{MemoryGB: pick(g, 0.0, 40, 100)}})
	}
	if len(q.Limits) == 0 || g.chance(40) {
		l := fsm.QuotaLimit{DeviceType: fsm.CPU, MaxAmount: fsm.Resources{ComputeUnits: pick(g, 4.0, 16, 64)}}
		if g.chance(50) {
			l.MaxCount = n(g.rng.Intn(6))
		}
		q.Limits = append(q.Limits, l)
	}
	if g.chance(50) {
		q.Weight = pick(g, 0.5, 1, 2, 5)
	}
	if g.chance(50) {
		q.Borrow = true
		q.ReclaimGrace = pick(g, 0, time.Second, 20*time.Second)
	}
	return step{kind: "set quota", cmd: &fsm.SetQuota{Quota: q}}
}

// setQueueConfig turns fair share on (with a short half-life, so that
// usage decays within the log) or off, and preemption for waiting
// requests on or off.
func (g *cmdGen) setQueueConfig() step {
	c := &fsm.SetQueueConfig{PreemptWaiting: g.chance(60)}
	if !g.chance(25) {
		c.FairShare, c.HalfLife = true, pick(g, 0, time.Minute, 10*time.Minute)
	}
	kind := "fair share off"
	if c.FairShare {
		kind = "fair share on"
	}
	return step{kind: kind, cmd: c}
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

// setServerRemoved removes or readmits one of a few servers; readmitting a
// server that is not removed is refused.
func (g *cmdGen) setServerRemoved(s *fsm.State) step {
	id := pick(g, "s4", "s5", "s6")
	removed := g.chance(50)
	st := step{kind: "set server removed", cmd: &fsm.SetServerRemoved{ServerID: id, Removed: removed}}
	if !removed && !s.ServerRemoved(id) {
		st.kind, st.bad, st.want = "readmit a server not removed", true, fsm.ErrNotFound
	}
	return st
}

func (g *cmdGen) setRetention() step {
	r := fsm.Retention{
		MaxCount: pick(g, 1, 10, 50, 200),
		MaxAge:   pick(g, time.Minute, 10*time.Minute, time.Hour, 24*time.Hour, 7*24*time.Hour),
	}
	return step{kind: "set retention", cmd: &fsm.SetRetention{Retention: r}}
}
