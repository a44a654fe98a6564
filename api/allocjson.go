package api

import (
	"strconv"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/internal/jsonappend"
)

// The answer to every allocation write is one wire.Allocation, and
// encoding it with encoding/json was a tenth of the leader's CPU in the
// batched benchmark (BENCHMARKS.md): reflection over some forty fields,
// and the times and durations through their MarshalJSON, whose output
// encoding/json then scans again. appendAllocation writes the same bytes
// directly. It covers the fields an allocation's answer usually has and
// hands the rest to encoding/json field by field (maps, label selectors,
// a why-not, a reclaim in progress), so what a client reads never
// depends on which path wrote it. TestAllocationJSONIsEncodingJSON fills
// every field of random allocations, through reflection, and compares
// the two byte for byte: a field added to wire.Allocation that is not
// written here fails it.

// appendAllocation appends a as encoding/json's Encoder writes it
// (without the newline). ok is false when a holds a value encoding/json
// refuses (a NaN, a year past 9999); the caller then lets encoding/json
// answer as before.
func appendAllocation(b []byte, a *wire.Allocation) (_ []byte, ok bool) {
	j := jsonAppender{b: b, ok: true}
	j.raw(`{"id":`)
	j.str(a.ID)
	if a.RequestID != "" {
		j.raw(`,"request_id":`)
		j.str(a.RequestID)
	}
	j.raw(`,"namespace":`)
	j.str(a.Namespace)
	j.raw(`,"request":`)
	j.request(&a.Request)
	j.raw(`,"status":`)
	j.str(string(a.Status))
	j.raw(`,"policy":`)
	j.str(string(a.Policy))
	j.optStr(`,"host":`, a.Host)
	j.optStrs(`,"hosts":`, a.Hosts)
	if len(a.Devices) > 0 {
		j.raw(`,"devices":[`)
		for i := range a.Devices {
			if i > 0 {
				j.raw(",")
			}
			d := &a.Devices[i]
			j.raw(`{"device_id":`)
			j.str(d.DeviceID)
			j.raw(`,"claim":`)
			j.int(int64(d.Claim))
			j.raw(`,"amount":`)
			j.resources(&d.Amount, "")
			j.raw("}")
		}
		j.raw("]")
	}
	j.optStrs(`,"reserved":`, a.Reserved)
	j.optTime(`,"expected_start":`, a.ExpectedStart)
	j.raw(`,"seq":`)
	j.uint(a.Seq)
	j.raw(`,"create_index":`)
	j.uint(a.CreateIndex)
	j.raw(`,"modify_index":`)
	j.uint(a.ModifyIndex)
	j.optTime(`,"requested_at":`, a.RequestedAt)
	j.optTime(`,"allocated_at":`, a.AllocatedAt)
	j.optTime(`,"ended_at":`, a.EndedAt)
	j.optTime(`,"deadline":`, a.Deadline)
	j.optTime(`,"lease_expires_at":`, a.LeaseExpiresAt)
	j.optStr(`,"preempted_by":`, a.PreemptedBy)
	j.optStrs(`,"preempted":`, a.Preempted)
	if a.Preempting != nil {
		j.raw(`,"preempting":`)
		j.value(a.Preempting)
	}
	j.optStr(`,"reason":`, a.Reason)
	if a.WhyNot != nil {
		j.raw(`,"why_not":`)
		j.value(a.WhyNot)
	}
	j.raw("}")
	return j.b, j.ok
}

// jsonAppender appends JSON as encoding/json writes it; ok turns false
// at the first value it would refuse.
type jsonAppender struct {
	b  []byte
	ok bool
}

func (j *jsonAppender) raw(s string) { j.b = append(j.b, s...) }

func (j *jsonAppender) int(v int64) { j.b = strconv.AppendInt(j.b, v, 10) }

func (j *jsonAppender) uint(v uint64) { j.b = strconv.AppendUint(j.b, v, 10) }

// str writes a string.
func (j *jsonAppender) str(s string) { j.b = jsonappend.String(j.b, s) }

// optStr writes name and s unless s is empty (omitempty).
func (j *jsonAppender) optStr(name, s string) {
	if s != "" {
		j.raw(name)
		j.str(s)
	}
}

// optStrs writes name and the strings unless there are none (omitempty).
func (j *jsonAppender) optStrs(name string, ss []string) {
	if len(ss) == 0 {
		return
	}
	j.raw(name)
	j.b = append(j.b, '[')
	for i, s := range ss {
		if i > 0 {
			j.b = append(j.b, ',')
		}
		j.str(s)
	}
	j.b = append(j.b, ']')
}

// optTime writes name and t unless t is zero (omitzero), as
// time.Time.MarshalJSON does.
func (j *jsonAppender) optTime(name string, t time.Time) {
	if t.IsZero() {
		return
	}
	j.raw(name)
	j.b = append(j.b, '"')
	b, err := t.AppendText(j.b)
	if err != nil {
		j.ok = false
		return
	}
	j.b = append(b, '"')
}

// optDuration writes name and d unless d is zero (omitempty), as
// wire.Duration.MarshalJSON does.
func (j *jsonAppender) optDuration(name string, d wire.Duration) {
	if d != 0 {
		j.raw(name)
		j.str(time.Duration(d).String())
	}
}

// float writes f as encoding/json writes a float64.
func (j *jsonAppender) float(f float64) {
	var ok bool
	if j.b, ok = jsonappend.Float(j.b, f); !ok {
		j.ok = false
	}
}

// resources writes r, its zero members left out (omitempty), and then
// the rest of its object (after, already JSON) before the brace.
func (j *jsonAppender) resources(r *wire.Resources, after string) {
	j.b = append(j.b, '{')
	first := true
	for _, m := range [...]struct {
		name string
		v    float64
	}{{`"memory_gb":`, r.MemoryGB}, {`"compute_units":`, r.ComputeUnits}, {`"storage_gb":`, r.StorageGB}, {`"bandwidth_gbps":`, r.BandwidthGbps}} {
		if m.v == 0 {
			continue
		}
		if !first {
			j.b = append(j.b, ',')
		}
		first = false
		j.raw(m.name)
		j.float(m.v)
	}
	if after != "" {
		if !first {
			j.b = append(j.b, ',')
		}
		j.raw(after)
	}
	j.b = append(j.b, '}')
}

func (j *jsonAppender) request(r *wire.Request) {
	j.raw(`{"claims":`)
	if r.Claims == nil {
		j.raw("null")
	} else {
		j.b = append(j.b, '[')
		for i := range r.Claims {
			if i > 0 {
				j.b = append(j.b, ',')
			}
			j.claim(&r.Claims[i])
		}
		j.b = append(j.b, ']')
	}
	if r.Priority != 0 {
		j.raw(`,"priority":`)
		j.int(int64(r.Priority))
	}
	j.optDuration(`,"timeout":`, r.Timeout)
	j.optDuration(`,"lease_ttl":`, r.LeaseTTL)
	j.optStr(`,"pool":`, r.Pool)
	if r.Labels.Required != nil || r.Labels.Preferred != nil || r.Labels.Forbidden != nil {
		j.raw(`,"labels":`)
		j.value(&r.Labels)
	}
	if r.MaxHosts != 0 {
		j.raw(`,"max_hosts":`)
		j.int(int64(r.MaxHosts))
	}
	if r.MinPerHost != 0 {
		j.raw(`,"min_per_host":`)
		j.int(int64(r.MinPerHost))
	}
	j.optStr(`,"same":`, r.Same)
	j.optStr(`,"host":`, r.Host)
	j.b = append(j.b, '}')
}

func (j *jsonAppender) claim(c *wire.Claim) {
	j.raw(`{"type":`)
	j.str(string(c.Type))
	j.raw(`,"count":`)
	j.int(int64(c.Count))
	j.optStr(`,"pool":`, c.Pool)
	j.raw(`,"capabilities":`)
	custom := ""
	if len(c.Capabilities.Custom) > 0 {
		m, ok := jsonappend.Value([]byte(`"custom":`), c.Capabilities.Custom)
		j.ok = j.ok && ok
		custom = string(m)
	}
	j.resources(&c.Capabilities.Resources, custom)
	j.raw(`,"amount":`)
	j.resources(&c.Amount, "")
	j.optStr(`,"topology":`, c.Topology)
	j.b = append(j.b, '}')
}

// value writes v with encoding/json.
func (j *jsonAppender) value(v any) {
	var ok bool
	if j.b, ok = jsonappend.Value(j.b, v); !ok {
		j.ok = false
	}
}
