package api

import (
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
	j := jsonAppender{jsonappend.New(b)}
	j.Raw(`{"id":`)
	j.Str(a.ID)
	j.OptStr(`,"request_id":`, a.RequestID)
	j.Raw(`,"namespace":`)
	j.Str(a.Namespace)
	j.Raw(`,"request":`)
	j.request(&a.Request)
	j.Raw(`,"status":`)
	j.Str(string(a.Status))
	j.Raw(`,"policy":`)
	j.Str(string(a.Policy))
	j.OptStr(`,"host":`, a.Host)
	j.optStrs(`,"hosts":`, a.Hosts)
	if len(a.Devices) > 0 {
		j.Raw(`,"devices":[`)
		for i := range a.Devices {
			if i > 0 {
				j.Raw(",")
			}
			d := &a.Devices[i]
			j.Raw(`{"device_id":`)
			j.Str(d.DeviceID)
			j.Raw(`,"claim":`)
			j.Int(int64(d.Claim))
			j.Raw(`,"amount":{`)
			first := true
			j.resources(&first, &d.Amount)
			j.Raw("}}")
		}
		j.Raw("]")
	}
	j.optStrs(`,"reserved":`, a.Reserved)
	j.optTime(`,"expected_start":`, a.ExpectedStart)
	j.Raw(`,"seq":`)
	j.Uint(a.Seq)
	j.Raw(`,"create_index":`)
	j.Uint(a.CreateIndex)
	j.Raw(`,"modify_index":`)
	j.Uint(a.ModifyIndex)
	j.optTime(`,"requested_at":`, a.RequestedAt)
	j.optTime(`,"allocated_at":`, a.AllocatedAt)
	j.optTime(`,"ended_at":`, a.EndedAt)
	j.optTime(`,"deadline":`, a.Deadline)
	j.optTime(`,"lease_expires_at":`, a.LeaseExpiresAt)
	j.OptStr(`,"preempted_by":`, a.PreemptedBy)
	j.optStrs(`,"preempted":`, a.Preempted)
	if a.Preempting != nil {
		j.Raw(`,"preempting":`)
		j.Value(a.Preempting)
	}
	j.OptStr(`,"reason":`, a.Reason)
	if a.WhyNot != nil {
		j.Raw(`,"why_not":`)
		j.Value(a.WhyNot)
	}
	j.Raw("}")
	return j.B, j.OK
}

// jsonAppender writes the JSON of the wire types of an allocation.
type jsonAppender struct{ jsonappend.Appender }

// optStrs writes name and the strings unless there are none (omitempty).
func (j *jsonAppender) optStrs(name string, ss []string) {
	if len(ss) == 0 {
		return
	}
	j.Raw(name)
	j.B = append(j.B, '[')
	for i, s := range ss {
		if i > 0 {
			j.B = append(j.B, ',')
		}
		j.Str(s)
	}
	j.B = append(j.B, ']')
}

// optTime writes name and t unless t is zero (omitzero), as
// time.Time.MarshalJSON does.
func (j *jsonAppender) optTime(name string, t time.Time) {
	if t.IsZero() {
		return
	}
	j.Raw(name)
	j.B = append(j.B, '"')
	b, err := t.AppendText(j.B)
	if err != nil {
		j.OK = false
		return
	}
	j.B = append(b, '"')
}

// optDuration writes name and d unless d is zero (omitempty), as
// wire.Duration.MarshalJSON does.
func (j *jsonAppender) optDuration(name string, d wire.Duration) {
	if d != 0 {
		j.Raw(name)
		j.Str(time.Duration(d).String())
	}
}

// resources writes r's members, their zeros left out (omitempty),
// inside an object already open; first is cleared once it writes one.
func (j *jsonAppender) resources(first *bool, r *wire.Resources) {
	j.OptFloat(first, `"memory_gb":`, r.MemoryGB)
	j.OptFloat(first, `"compute_units":`, r.ComputeUnits)
	j.OptFloat(first, `"storage_gb":`, r.StorageGB)
	j.OptFloat(first, `"bandwidth_gbps":`, r.BandwidthGbps)
}

func (j *jsonAppender) request(r *wire.Request) {
	j.Raw(`{"claims":`)
	if r.Claims == nil {
		j.Raw("null")
	} else {
		j.B = append(j.B, '[')
		for i := range r.Claims {
			if i > 0 {
				j.B = append(j.B, ',')
			}
			j.claim(&r.Claims[i])
		}
		j.B = append(j.B, ']')
	}
	j.OptInt(`,"priority":`, int64(r.Priority))
	j.optDuration(`,"timeout":`, r.Timeout)
	j.optDuration(`,"lease_ttl":`, r.LeaseTTL)
	j.OptStr(`,"pool":`, r.Pool)
	if r.Labels.Required != nil || r.Labels.Preferred != nil || r.Labels.Forbidden != nil {
		j.Raw(`,"labels":`)
		j.Value(&r.Labels)
	}
	j.OptInt(`,"max_hosts":`, int64(r.MaxHosts))
	j.OptInt(`,"min_per_host":`, int64(r.MinPerHost))
	j.OptStr(`,"same":`, r.Same)
	j.OptStr(`,"host":`, r.Host)
	j.B = append(j.B, '}')
}

func (j *jsonAppender) claim(c *wire.Claim) {
	j.Raw(`{"type":`)
	j.Str(string(c.Type))
	j.Raw(`,"count":`)
	j.Int(int64(c.Count))
	j.OptStr(`,"pool":`, c.Pool)
	j.Raw(`,"capabilities":{`)
	first := true
	j.resources(&first, &c.Capabilities.Resources)
	j.OptMap(&first, `"custom":`, c.Capabilities.Custom)
	j.Raw(`},"amount":{`)
	first = true
	j.resources(&first, &c.Amount)
	j.Raw("}")
	j.OptStr(`,"topology":`, c.Topology)
	j.B = append(j.B, '}')
}
