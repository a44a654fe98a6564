package fsm_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// populated is a small state with devices of several kinds and allocations
// in every state, built through the public API.
type populated struct {
	s   *fsm.State
	idx uint64
	now int64
	// Allocation IDs: active with a lease, active without one, pending,
	// and released.
	active, noLease, pending, released string
}

func newPopulated(tb testing.TB) *populated {
	tb.Helper()
	p := &populated{s: fsm.New(), now: randomLogStart}
	p.must(tb, &fsm.RegisterHost{Host: fsm.HostSpec{ID: "h1", Labels: map[string]string{"rack": "r1"}}, Devices: []fsm.DeviceSpec{
		{ID: "g1", Type: fsm.GPU, Name: "a100", Capabilities: fsm.Capabilities{
			Resources: fsm.Resources{MemoryGB: 80, ComputeUnits: 100}, Custom: map[string]string{"model": "a100"}}},
		{ID: "g2", Type: fsm.GPU, Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: 16, ComputeUnits: 50}}},
		{ID: "c1", Type: fsm.CPU, Capabilities: fsm.Capabilities{Resources: fsm.Resources{ComputeUnits: 32}}, Shareable: true},
		{ID: "m1", Type: fsm.Memory, Pool: "p1", Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: 256}}, Shareable: true},
	}})
	p.must(tb, &fsm.RegisterHost{Host: fsm.HostSpec{ID: "h2"}, Devices: []fsm.DeviceSpec{
		{ID: "g3", Type: fsm.GPU, Labels: map[string]string{"zone": "z1"}, Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: 40}}},
	}})
	big := fsm.Claim{Type: fsm.GPU, Count: 1, Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: 70}}}
	p.active = p.must(tb, &fsm.Allocate{Request: fsm.Request{Claims: []fsm.Claim{big}, Priority: 100, LeaseTTL: time.Hour}}).Allocation.ID
	p.noLease = p.must(tb, &fsm.Allocate{Request: fsm.Request{Claims: []fsm.Claim{
		{Type: fsm.CPU, Count: 1, Amount: fsm.Resources{ComputeUnits: 4}}}}}).Allocation.ID
	p.pending = p.must(tb, &fsm.Allocate{Request: fsm.Request{Claims: []fsm.Claim{big}, Priority: 50, Timeout: time.Hour}}).Allocation.ID
	p.released = p.must(tb, &fsm.Allocate{Request: fsm.Request{Claims: []fsm.Claim{
		{Type: fsm.Memory, Count: 1, Amount: fsm.Resources{MemoryGB: 16}}}}}).Allocation.ID
	p.must(tb, &fsm.Release{AllocationID: p.released})
	for id, want := range map[string]fsm.AllocStatus{p.active: fsm.Active, p.noLease: fsm.Active, p.pending: fsm.Pending, p.released: fsm.Released} {
		if a, ok := p.s.Allocation(id); !ok || a.Status != want {
			tb.Fatalf("populated state: allocation %s is not %s", id, want)
		}
	}
	return p
}

// apply stamps a command one millisecond after the previous one and
// applies it at the next index.
func (p *populated) apply(c fsm.Command) fsm.Result {
	p.idx++
	p.now += int64(time.Millisecond)
	fsm.Stamp(c, time.Unix(0, p.now))
	return p.s.Apply(p.idx, c)
}

func (p *populated) must(tb testing.TB, c fsm.Command) fsm.Result {
	tb.Helper()
	r := p.apply(c)
	if r.Err != nil {
		tb.Fatalf("%T: %v", c, r.Err)
	}
	if err := p.s.CheckInvariants(); err != nil {
		tb.Fatalf("after %T: %v", c, err)
	}
	return r
}

func oneClaim(c fsm.Claim) *fsm.Allocate {
	return &fsm.Allocate{Request: fsm.Request{Claims: []fsm.Claim{c}}}
}

func gpuClaim() fsm.Claim { return fsm.Claim{Type: fsm.GPU, Count: 1} }

// TestBadCommandsRefused applies each bad command to a populated state: it
// must be refused with the expected error, leave the snapshot byte for byte
// as it was, and not be remembered under its request ID.
func TestBadCommandsRefused(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	withAmount := func(r fsm.Resources) fsm.Command {
		return oneClaim(fsm.Claim{Type: fsm.CPU, Count: 1, Amount: r})
	}
	withCaps := func(r fsm.Resources) fsm.Command {
		return oneClaim(fsm.Claim{Type: fsm.GPU, Count: 1, Capabilities: fsm.Capabilities{Resources: r}})
	}
	withRequest := func(edit func(*fsm.Request)) fsm.Command {
		c := oneClaim(gpuClaim())
		edit(&c.Request)
		return c
	}
	gpuSpec := func(id string) fsm.DeviceSpec {
		return fsm.DeviceSpec{ID: id, Type: fsm.GPU, Capabilities: fsm.Capabilities{Resources: fsm.Resources{MemoryGB: 24}}}
	}
	register := func(host string, devs ...fsm.DeviceSpec) fsm.Command {
		return &fsm.RegisterHost{Host: fsm.HostSpec{ID: host}, Devices: devs}
	}
	withDevice := func(edit func(*fsm.DeviceSpec)) fsm.Command {
		d := gpuSpec("new-1")
		edit(&d)
		return register("h3", gpuSpec("new-0"), d)
	}
	manyDevices := make([]fsm.DeviceSpec, fsm.MaxDevicesPerHost+1)
	for i := range manyDevices {
		manyDevices[i] = gpuSpec(fmt.Sprintf("many-%d", i))
	}

	cases := []struct {
		name string
		cmd  func(p *populated) fsm.Command
		want *fsm.Error
		// unencodable commands carry NaN or Inf: the codec refuses them
		// too, so they are applied as they are.
		unencodable bool
	}{
		// Devices and hosts.
		{name: "status of unknown device", want: fsm.ErrNotFound, cmd: func(*populated) fsm.Command {
			return &fsm.SetDeviceStatus{DeviceID: "no-such-device", Status: fsm.Draining}
		}},
		{name: "device status offline", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return &fsm.SetDeviceStatus{DeviceID: "g2", Status: fsm.Offline}
		}},
		{name: "device status unknown", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return &fsm.SetDeviceStatus{DeviceID: "g2", Status: "broken"}
		}},
		{name: "remove unknown host", want: fsm.ErrNotFound, cmd: func(*populated) fsm.Command {
			return &fsm.RemoveHost{HostID: "no-such-host"}
		}},
		{name: "unknown host down", want: fsm.ErrNotFound, cmd: func(*populated) fsm.Command {
			return &fsm.SetHostStatus{HostID: "no-such-host"}
		}},
		{name: "register duplicate device ids", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return register("h3", gpuSpec("new-0"), gpuSpec("new-1"), gpuSpec("new-0"))
		}},
		{name: "re-register with duplicate device ids", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return register("h2", gpuSpec("g3"), gpuSpec("g3"))
		}},
		{name: "register device of another host", want: fsm.ErrConflict, cmd: func(*populated) fsm.Command {
			return register("h3", gpuSpec("new-0"), gpuSpec("g1"))
		}},
		{name: "re-register taking another host's device", want: fsm.ErrConflict, cmd: func(*populated) fsm.Command {
			return register("h2", gpuSpec("g3"), gpuSpec("c1"))
		}},
		{name: "register empty host id", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return register("", gpuSpec("new-0"))
		}},
		{name: "register device without id", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return withDevice(func(d *fsm.DeviceSpec) { d.ID = "" })
		}},
		{name: "register unknown device type", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return withDevice(func(d *fsm.DeviceSpec) { d.Type = "FPGA" })
		}},
		{name: "register negative capability", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return withDevice(func(d *fsm.DeviceSpec) { d.Capabilities.MemoryGB = -1 })
		}},
		{name: "register NaN capability", want: fsm.ErrInvalid, unencodable: true, cmd: func(*populated) fsm.Command {
			return withDevice(func(d *fsm.DeviceSpec) { d.Capabilities.ComputeUnits = nan })
		}},
		{name: "register infinite capability", want: fsm.ErrInvalid, unencodable: true, cmd: func(*populated) fsm.Command {
			return withDevice(func(d *fsm.DeviceSpec) { d.Capabilities.StorageGB = inf })
		}},
		{name: "register too many devices", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return register("h3", manyDevices...)
		}},

		// Requests.
		{name: "negative amount", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return withAmount(fsm.Resources{ComputeUnits: -2})
		}},
		{name: "NaN amount", want: fsm.ErrInvalid, unencodable: true, cmd: func(*populated) fsm.Command {
			return withAmount(fsm.Resources{ComputeUnits: nan})
		}},
		{name: "infinite amount", want: fsm.ErrInvalid, unencodable: true, cmd: func(*populated) fsm.Command {
			return withAmount(fsm.Resources{MemoryGB: inf})
		}},
		{name: "minus infinite amount", want: fsm.ErrInvalid, unencodable: true, cmd: func(*populated) fsm.Command {
			return withAmount(fsm.Resources{BandwidthGbps: math.Inf(-1)})
		}},
		{name: "negative capability", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return withCaps(fsm.Resources{MemoryGB: -8})
		}},
		{name: "NaN capability", want: fsm.ErrInvalid, unencodable: true, cmd: func(*populated) fsm.Command {
			return withCaps(fsm.Resources{StorageGB: nan})
		}},
		{name: "infinite capability", want: fsm.ErrInvalid, unencodable: true, cmd: func(*populated) fsm.Command {
			return withCaps(fsm.Resources{MemoryGB: inf})
		}},
		{name: "empty claims", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return &fsm.Allocate{Request: fsm.Request{Claims: []fsm.Claim{}}}
		}},
		{name: "no claims", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return &fsm.Allocate{}
		}},
		{name: "too many claims", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return withRequest(func(r *fsm.Request) {
				for len(r.Claims) <= fsm.MaxClaims {
					r.Claims = append(r.Claims, gpuClaim())
				}
			})
		}},
		{name: "count 0", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return oneClaim(fsm.Claim{Type: fsm.GPU, Count: 0})
		}},
		{name: "negative count", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return oneClaim(fsm.Claim{Type: fsm.GPU, Count: -1})
		}},
		{name: "count too large", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return oneClaim(fsm.Claim{Type: fsm.GPU, Count: fsm.MaxClaimCount + 1})
		}},
		{name: "count 0 in second claim", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return withRequest(func(r *fsm.Request) { r.Claims = append(r.Claims, fsm.Claim{Type: fsm.CPU}) })
		}},
		{name: "unknown claim type", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return oneClaim(fsm.Claim{Type: "FPGA", Count: 1})
		}},
		{name: "empty claim type", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return oneClaim(fsm.Claim{Count: 1})
		}},
		{name: "priority -1", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return withRequest(func(r *fsm.Request) { r.Priority = -1 })
		}},
		{name: "priority 1001", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return withRequest(func(r *fsm.Request) { r.Priority = fsm.MaxPriority + 1 })
		}},
		{name: "negative timeout", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return withRequest(func(r *fsm.Request) { r.Timeout = -time.Second })
		}},
		{name: "timeout too long", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return withRequest(func(r *fsm.Request) { r.Timeout = fsm.MaxDuration + 1 })
		}},
		{name: "negative lease", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return withRequest(func(r *fsm.Request) { r.LeaseTTL = -time.Minute })
		}},
		{name: "allocation id not a uuid", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			c := oneClaim(gpuClaim())
			c.AllocationID = "alloc-1"
			return c
		}},
		{name: "allocation id not canonical", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			c := oneClaim(gpuClaim())
			c.AllocationID = "6F0D6F9E-3C3A-4D0E-9B7E-8A1D4C2F5E10"
			return c
		}},
		{name: "allocation id of an active allocation", want: fsm.ErrConflict, cmd: func(p *populated) fsm.Command {
			c := oneClaim(gpuClaim())
			c.AllocationID = p.active
			return c
		}},
		{name: "allocation id of a released allocation", want: fsm.ErrConflict, cmd: func(p *populated) fsm.Command {
			c := oneClaim(gpuClaim())
			c.AllocationID = p.released
			return c
		}},

		// Release, renew, cancel.
		{name: "release unknown", want: fsm.ErrNotFound, cmd: func(*populated) fsm.Command {
			return &fsm.Release{AllocationID: "0b5e0d43-5d6e-4c59-9d2f-2a1f0c7e8b11"}
		}},
		{name: "release empty id", want: fsm.ErrNotFound, cmd: func(*populated) fsm.Command {
			return &fsm.Release{}
		}},
		{name: "release already released", want: fsm.ErrNotActive, cmd: func(p *populated) fsm.Command {
			return &fsm.Release{AllocationID: p.released}
		}},
		{name: "release pending", want: fsm.ErrNotActive, cmd: func(p *populated) fsm.Command {
			return &fsm.Release{AllocationID: p.pending}
		}},
		{name: "renew pending", want: fsm.ErrNotActive, cmd: func(p *populated) fsm.Command {
			return &fsm.Renew{AllocationID: p.pending, TTL: time.Minute}
		}},
		{name: "renew released", want: fsm.ErrNotActive, cmd: func(p *populated) fsm.Command {
			return &fsm.Renew{AllocationID: p.released, TTL: time.Minute}
		}},
		{name: "renew unknown", want: fsm.ErrNotFound, cmd: func(*populated) fsm.Command {
			return &fsm.Renew{AllocationID: "0b5e0d43-5d6e-4c59-9d2f-2a1f0c7e8b11", TTL: time.Minute}
		}},
		{name: "renew negative ttl", want: fsm.ErrInvalid, cmd: func(p *populated) fsm.Command {
			return &fsm.Renew{AllocationID: p.active, TTL: -time.Minute}
		}},
		{name: "renew ttl too long", want: fsm.ErrInvalid, cmd: func(p *populated) fsm.Command {
			return &fsm.Renew{AllocationID: p.active, TTL: fsm.MaxDuration + 1}
		}},
		{name: "renew without lease or ttl", want: fsm.ErrInvalid, cmd: func(p *populated) fsm.Command {
			return &fsm.Renew{AllocationID: p.noLease}
		}},
		{name: "cancel active", want: fsm.ErrConflict, cmd: func(p *populated) fsm.Command {
			return &fsm.Cancel{AllocationID: p.active}
		}},
		{name: "cancel released", want: fsm.ErrNotActive, cmd: func(p *populated) fsm.Command {
			return &fsm.Cancel{AllocationID: p.released}
		}},
		{name: "cancel unknown", want: fsm.ErrNotFound, cmd: func(*populated) fsm.Command {
			return &fsm.Cancel{AllocationID: "0b5e0d43-5d6e-4c59-9d2f-2a1f0c7e8b11"}
		}},

		// Policies and retention.
		{name: "unknown policy", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return &fsm.SetPolicy{DeviceType: fsm.GPU, Config: fsm.PolicyConfig{Policy: "Fastest"}}
		}},
		{name: "policy name in wrong case", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return &fsm.SetPolicy{DeviceType: fsm.GPU, Config: fsm.PolicyConfig{Policy: "bestfit"}}
		}},
		{name: "empty policy for a type", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return &fsm.SetPolicy{DeviceType: fsm.GPU}
		}},
		{name: "unknown policy for a pool", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return &fsm.SetPolicy{Pool: "p1", Config: fsm.PolicyConfig{Policy: "Fastest"}}
		}},
		{name: "policy of unknown type", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return &fsm.SetPolicy{DeviceType: "FPGA", Config: fsm.PolicyConfig{Policy: fsm.FirstFit}}
		}},
		{name: "policy without type or pool", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return &fsm.SetPolicy{Config: fsm.PolicyConfig{Policy: fsm.FirstFit}}
		}},
		{name: "negative preemption gap", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return &fsm.SetPolicy{DeviceType: fsm.GPU, Config: fsm.PolicyConfig{Policy: fsm.PriorityBased, PreemptionGap: -1}}
		}},
		{name: "preemption gap too large", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return &fsm.SetPolicy{Pool: "p1", Config: fsm.PolicyConfig{Policy: fsm.PriorityBased, PreemptionGap: fsm.MaxPriority + 1}}
		}},
		{name: "retention count 0", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return &fsm.SetRetention{Retention: fsm.Retention{MaxCount: 0, MaxAge: time.Hour}}
		}},
		{name: "retention count negative", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return &fsm.SetRetention{Retention: fsm.Retention{MaxCount: -1, MaxAge: time.Hour}}
		}},
		{name: "retention count too large", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return &fsm.SetRetention{Retention: fsm.Retention{MaxCount: fsm.MaxRetentionCount + 1, MaxAge: time.Hour}}
		}},
		{name: "retention age 0", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return &fsm.SetRetention{Retention: fsm.Retention{MaxCount: 10}}
		}},
		{name: "retention age negative", want: fsm.ErrInvalid, cmd: func(*populated) fsm.Command {
			return &fsm.SetRetention{Retention: fsm.Retention{MaxCount: 10, MaxAge: -time.Hour}}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPopulated(t)
			before := p.s.SnapshotBytes()
			for attempt := 0; attempt < 2; attempt++ {
				c := tc.cmd(p)
				fsm.SetRequestID(c, "bad-request")
				// The same time as the previous command: the clock must
				// not move, so any change would show in the snapshot.
				fsm.Stamp(c, time.Unix(0, p.now))
				raw, err := fsm.Encode(c)
				switch {
				case tc.unencodable:
					if !errors.Is(err, fsm.ErrInvalid) {
						t.Fatalf("encode gave %v, want %s", err, fsm.ErrInvalid.Code)
					}
				case err != nil:
					t.Fatalf("encode: %v", err)
				default:
					if c, err = fsm.Decode(raw); err != nil {
						t.Fatalf("decode: %v", err)
					}
				}
				idx := p.idx + 1 + uint64(attempt)
				res := p.s.Apply(idx, c)
				if !errors.Is(res.Err, tc.want) {
					t.Fatalf("attempt %d: got %v, want %s", attempt, res.Err, tc.want.Code)
				}
				var e *fsm.Error
				if !errors.As(res.Err, &e) || e.Message == "" {
					t.Fatalf("error %v is not an *fsm.Error with a message", res.Err)
				}
				// A refusal is not remembered: the retry is refused anew.
				if res.Index != idx {
					t.Fatalf("attempt %d: result of index %d, want %d (a refusal must not be remembered)", attempt, res.Index, idx)
				}
				if res.Allocation != nil {
					t.Fatalf("refused command returned allocation %+v", res.Allocation)
				}
				if after := p.s.SnapshotBytes(); !bytes.Equal(before, after) {
					t.Fatalf("attempt %d: the refused command changed the snapshot:\n%s\n%s", attempt, before, after)
				}
				if err := p.s.CheckInvariants(); err != nil {
					t.Fatal(err)
				}
			}
			// The request ID of a refused command is free for a good one.
			c := &fsm.Tick{}
			fsm.SetRequestID(c, "bad-request")
			if r := p.apply(c); r.Err != nil || r.Index != p.idx {
				t.Fatalf("good command with the refused request ID: %+v", r)
			}
		})
	}
}

// TestDecodeRefuses feeds the codec malformed log entries.
func TestDecodeRefuses(t *testing.T) {
	cases := []struct {
		name string
		raw  []byte
		want *fsm.Error
	}{
		{"empty", nil, fsm.ErrInvalid},
		{"type 0", []byte{0, '{', '}'}, fsm.ErrUnknownCommand},
		{"type after the last", []byte{byte(fsm.BatchType) + 1, '{', '}'}, fsm.ErrUnknownCommand},
		{"type 255", []byte{255}, fsm.ErrUnknownCommand},
		{"no payload", []byte{byte(fsm.AllocateType)}, fsm.ErrInvalid},
		{"truncated payload", append([]byte{byte(fsm.AllocateType)}, `{"request":{"claims":[`...), fsm.ErrInvalid},
		{"wrong field type", append([]byte{byte(fsm.ReleaseType)}, `{"allocation_id":5}`...), fsm.ErrInvalid},
		{"payload not an object", append([]byte{byte(fsm.TickType)}, `[1,2]`...), fsm.ErrInvalid},
		{"number out of range", append([]byte{byte(fsm.AllocateType)}, `{"request":{"claims":[{"type":"GPU","count":1,"amount":{"memory_gb":1e999}}]}}`...), fsm.ErrInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := fsm.Decode(tc.raw)
			if !errors.Is(err, tc.want) || c != nil {
				t.Fatalf("Decode(%q) = %v, %v; want %s", tc.raw, c, err, tc.want.Code)
			}
		})
	}
}
