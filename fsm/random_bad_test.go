package fsm_test

import (
	"math"
	"strings"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// Bad commands: each is refused with a known error and changes nothing.

func badStep(kind string, want *fsm.Error, c fsm.Command) step {
	return step{kind: kind, cmd: c, bad: true, want: want}
}

func (g *cmdGen) badRelease(s *fsm.State, v *publicView) step {
	var ended []*fsm.Allocation
	for _, id := range g.allocIDs {
		if a, ok := s.Allocation(id); ok && !a.Status.Live() {
			ended = append(ended, a)
		}
	}
	switch r := g.rng.Intn(7); {
	case r == 0 && len(ended) > 0:
		a := pick(g, ended...)
		return badStep("release ended", fsm.ErrNotActive, inNamespaceOf(a, &fsm.Release{AllocationID: a.ID}))
	case r == 1 && len(ended) > 0:
		a := pick(g, ended...)
		return badStep("renew ended", fsm.ErrNotActive, inNamespaceOf(a, &fsm.Renew{AllocationID: a.ID}))
	case r == 2 && len(ended) > 0:
		a := pick(g, ended...)
		return badStep("cancel ended", fsm.ErrNotActive, inNamespaceOf(a, &fsm.Cancel{AllocationID: a.ID}))
	case r == 3:
		if p := g.liveWith(v, fsm.Pending); len(p) > 0 {
			a := pick(g, p...)
			if g.chance(50) {
				return badStep("release pending", fsm.ErrNotActive, inNamespaceOf(a, &fsm.Release{AllocationID: a.ID}))
			}
			return badStep("renew pending", fsm.ErrNotActive, inNamespaceOf(a, &fsm.Renew{AllocationID: a.ID}))
		}
	case r == 4:
		if a := g.liveWith(v, fsm.Active); len(a) > 0 {
			al := pick(g, a...)
			return badStep("cancel active", fsm.ErrConflict, inNamespaceOf(al, &fsm.Cancel{AllocationID: al.ID}))
		}
	case r == 5:
		if a := g.liveWith(v, fsm.Active); len(a) > 0 {
			al := pick(g, a...)
			if al.Request.LeaseTTL == 0 {
				return badStep("renew without ttl", fsm.ErrInvalid, inNamespaceOf(al, &fsm.Renew{AllocationID: al.ID}))
			}
			return badStep("renew negative ttl", fsm.ErrInvalid, inNamespaceOf(al, &fsm.Renew{AllocationID: al.ID, TTL: -time.Second}))
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
