package fsm

import (
	"strconv"

	"github.com/dmsc/dmsc/internal/jsonappend"
)

// encodeFast appends the payload of an allocation write (Allocate,
// Release, Renew, Cancel) byte for byte as encoding/json writes it, and
// reports false for any other command or a value encoding/json refuses
// (a NaN), which the caller then leaves to encoding/json. The leader
// encodes every write twice, once for its log entry and once, without
// its time and IDs, for its digest (commandDigest), and encoding/json's
// reflection was the larger part of both. Maps (a claim's custom values,
// a request's labels) still go through encoding/json, which sorts their
// keys. TestFastEncodeIsEncodingJSON compares the two on random writes.
func encodeFast(b []byte, c Command) (_ []byte, ok bool) {
	e := entryAppender{b: b, ok: true}
	switch c := c.(type) {
	case *Allocate:
		e.meta(&c.Meta)
		if c.AllocationID != "" {
			e.raw(`,"allocation_id":`)
			e.str(c.AllocationID)
		}
		e.raw(`,"request":`)
		e.request(&c.Request)
	case *Release:
		e.meta(&c.Meta)
		e.raw(`,"allocation_id":`)
		e.str(c.AllocationID)
	case *Cancel:
		e.meta(&c.Meta)
		e.raw(`,"allocation_id":`)
		e.str(c.AllocationID)
	case *Renew:
		e.meta(&c.Meta)
		e.raw(`,"allocation_id":`)
		e.str(c.AllocationID)
		if c.TTL != 0 {
			e.raw(`,"ttl":`)
			e.int(int64(c.TTL))
		}
	default:
		return b, false
	}
	e.raw("}")
	return e.b, e.ok
}

// entryAppender appends a command's JSON; ok turns false at the first
// value encoding/json would refuse.
type entryAppender struct {
	b  []byte
	ok bool
}

func (e *entryAppender) raw(s string) { e.b = append(e.b, s...) }

func (e *entryAppender) str(s string) { e.b = jsonappend.String(e.b, s) }

func (e *entryAppender) int(v int64) { e.b = strconv.AppendInt(e.b, v, 10) }

// optStr writes name and s unless s is empty (omitempty).
func (e *entryAppender) optStr(name, s string) {
	if s != "" {
		e.raw(name)
		e.str(s)
	}
}

// optInt writes name and v unless v is zero (omitempty).
func (e *entryAppender) optInt(name string, v int64) {
	if v != 0 {
		e.raw(name)
		e.int(v)
	}
}

// meta writes the opening brace and Meta's members.
func (e *entryAppender) meta(m *Meta) {
	e.raw("{")
	sep := ""
	if m.RequestID != "" {
		e.raw(`"request_id":`)
		e.str(m.RequestID)
		sep = ","
	}
	if m.Namespace != "" {
		e.raw(sep + `"namespace":`)
		e.str(m.Namespace)
		sep = ","
	}
	e.raw(sep + `"time":`)
	e.int(m.Time)
	e.optStr(`,"digest":`, m.Digest)
}

// resources writes Resources' members, their zeros left out (omitempty),
// inside an object already open; it reports whether it wrote any.
func (e *entryAppender) resources(r *Resources) (wrote bool) {
	for _, m := range [...]struct {
		name string
		v    float64
	}{{`"memory_gb":`, r.MemoryGB}, {`"compute_units":`, r.ComputeUnits}, {`"storage_gb":`, r.StorageGB}, {`"bandwidth_gbps":`, r.BandwidthGbps}} {
		if m.v == 0 {
			continue
		}
		if wrote {
			e.raw(",")
		}
		wrote = true
		e.raw(m.name)
		var ok bool
		if e.b, ok = jsonappend.Float(e.b, m.v); !ok {
			e.ok = false
		}
	}
	return wrote
}

// strMap writes name and m unless m is empty (omitempty), through
// encoding/json, after a comma unless it is the first member.
func (e *entryAppender) strMap(first *bool, name string, m map[string]string) {
	if len(m) == 0 {
		return
	}
	if !*first {
		e.raw(",")
	}
	*first = false
	e.raw(name)
	var ok bool
	if e.b, ok = jsonappend.Value(e.b, m); !ok {
		e.ok = false
	}
}

func (e *entryAppender) request(q *Request) {
	e.raw(`{"claims":`)
	if q.Claims == nil {
		e.raw("null")
	} else {
		e.raw("[")
		for i := range q.Claims {
			if i > 0 {
				e.raw(",")
			}
			e.claim(&q.Claims[i])
		}
		e.raw("]")
	}
	e.raw(`,"priority":`)
	e.int(int64(q.Priority))
	e.raw(`,"timeout":`)
	e.int(int64(q.Timeout))
	e.optInt(`,"lease_ttl":`, int64(q.LeaseTTL))
	e.optStr(`,"pool":`, q.Pool)
	e.raw(`,"labels":{`)
	first := true
	e.strMap(&first, `"required":`, q.Labels.Required)
	e.strMap(&first, `"preferred":`, q.Labels.Preferred)
	e.strMap(&first, `"forbidden":`, q.Labels.Forbidden)
	e.raw("}")
	e.optInt(`,"max_hosts":`, int64(q.MaxHosts))
	e.optInt(`,"min_per_host":`, int64(q.MinPerHost))
	e.optStr(`,"same":`, q.Same)
	e.optStr(`,"host":`, q.Host)
	e.raw("}")
}

func (e *entryAppender) claim(c *Claim) {
	e.raw(`{"type":`)
	e.str(string(c.Type))
	e.raw(`,"count":`)
	e.int(int64(c.Count))
	e.optStr(`,"pool":`, c.Pool)
	e.raw(`,"capabilities":{`)
	first := !e.resources(&c.Capabilities.Resources)
	e.strMap(&first, `"custom":`, c.Capabilities.Custom)
	e.raw(`},"amount":{`)
	e.resources(&c.Amount)
	e.raw("}")
	e.optStr(`,"topology":`, c.Topology)
	e.raw("}")
}
