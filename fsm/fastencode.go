package fsm

import "github.com/dmsc/dmsc/internal/jsonappend"

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
	e := entryAppender{jsonappend.New(b)}
	switch c := c.(type) {
	case *Allocate:
		e.meta(&c.Meta)
		if c.AllocationID != "" {
			e.Raw(`,"allocation_id":`)
			e.Str(c.AllocationID)
		}
		e.Raw(`,"request":`)
		e.request(&c.Request)
	case *Release:
		e.meta(&c.Meta)
		e.Raw(`,"allocation_id":`)
		e.Str(c.AllocationID)
	case *Cancel:
		e.meta(&c.Meta)
		e.Raw(`,"allocation_id":`)
		e.Str(c.AllocationID)
	case *Renew:
		e.meta(&c.Meta)
		e.Raw(`,"allocation_id":`)
		e.Str(c.AllocationID)
		if c.TTL != 0 {
			e.Raw(`,"ttl":`)
			e.Int(int64(c.TTL))
		}
	default:
		return b, false
	}
	e.Raw("}")
	return e.B, e.OK
}

// entryAppender writes the JSON of a command.
type entryAppender struct{ jsonappend.Appender }

// meta writes the opening brace and Meta's members.
func (e *entryAppender) meta(m *Meta) {
	e.Raw("{")
	sep := ""
	if m.RequestID != "" {
		e.Raw(`"request_id":`)
		e.Str(m.RequestID)
		sep = ","
	}
	if m.Namespace != "" {
		e.Raw(sep + `"namespace":`)
		e.Str(m.Namespace)
		sep = ","
	}
	e.Raw(sep + `"time":`)
	e.Int(m.Time)
	e.OptStr(`,"digest":`, m.Digest)
}

// resources writes Resources' members, their zeros left out (omitempty),
// inside an object already open; first is cleared once it writes one.
func (e *entryAppender) resources(first *bool, r *Resources) {
	e.OptFloat(first, `"memory_gb":`, r.MemoryGB)
	e.OptFloat(first, `"compute_units":`, r.ComputeUnits)
	e.OptFloat(first, `"storage_gb":`, r.StorageGB)
	e.OptFloat(first, `"bandwidth_gbps":`, r.BandwidthGbps)
}

func (e *entryAppender) request(q *Request) {
	e.Raw(`{"claims":`)
	if q.Claims == nil {
		e.Raw("null")
	} else {
		e.Raw("[")
		for i := range q.Claims {
			if i > 0 {
				e.Raw(",")
			}
			e.claim(&q.Claims[i])
		}
		e.Raw("]")
	}
	e.Raw(`,"priority":`)
	e.Int(int64(q.Priority))
	e.Raw(`,"timeout":`)
	e.Int(int64(q.Timeout))
	e.OptInt(`,"lease_ttl":`, int64(q.LeaseTTL))
	e.OptStr(`,"pool":`, q.Pool)
	e.Raw(`,"labels":{`)
	first := true
	e.OptMap(&first, `"required":`, q.Labels.Required)
	e.OptMap(&first, `"preferred":`, q.Labels.Preferred)
	e.OptMap(&first, `"forbidden":`, q.Labels.Forbidden)
	e.Raw("}")
	e.OptInt(`,"max_hosts":`, int64(q.MaxHosts))
	e.OptInt(`,"min_per_host":`, int64(q.MinPerHost))
	e.OptStr(`,"same":`, q.Same)
	e.OptStr(`,"host":`, q.Host)
	e.Raw("}")
}

func (e *entryAppender) claim(c *Claim) {
	e.Raw(`{"type":`)
	e.Str(string(c.Type))
	e.Raw(`,"count":`)
	e.Int(int64(c.Count))
	e.OptStr(`,"pool":`, c.Pool)
	e.Raw(`,"capabilities":{`)
	first := true
	e.resources(&first, &c.Capabilities.Resources)
	e.OptMap(&first, `"custom":`, c.Capabilities.Custom)
	e.Raw(`},"amount":{`)
	first = true
	e.resources(&first, &c.Amount)
	e.Raw("}")
	e.OptStr(`,"topology":`, c.Topology)
	e.Raw("}")
}
