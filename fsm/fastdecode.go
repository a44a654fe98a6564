package fsm

import (
	"strconv"
	"time"
)

// decodeFast reads the payload of an allocation write (Allocate,
// Release, Renew, Cancel) into c when it is what Encode writes for the
// plain commands of the write path, and reports whether it did. Every
// replica decodes every entry, and these four are nearly all of them
// under load: a general JSON decoder was a seventh of a follower's CPU
// in the batched benchmark (BENCHMARKS.md).
//
// It reads only the exact form encoding/json writes: members in the
// order of the struct, no space, strings of printable ASCII without
// escapes, numbers as encoding/json writes them, and no map (a claim's
// custom values, a request's labels). Anything else, it leaves to the
// general decoder, and c untouched; so what it reads, it reads as the
// general decoder does (TestFastDecodeIsTheDecoder compares them on
// random commands, FuzzFastDecode on any input).
func decodeFast(payload []byte, c any) bool {
	r := fastReader{b: payload, ok: true}
	switch c := c.(type) {
	case *Allocate:
		var v Allocate
		r.meta(&v.Meta)
		if r.member(`"allocation_id":`) {
			v.AllocationID = r.str()
		}
		r.want(`"request":`)
		r.request(&v.Request)
		return read(&r, c, v)
	case *Release:
		var v Release
		r.allocationWrite(&v.Meta, &v.AllocationID)
		return read(&r, c, v)
	case *Cancel:
		var v Cancel
		r.allocationWrite(&v.Meta, &v.AllocationID)
		return read(&r, c, v)
	case *Renew:
		var v Renew
		r.allocationWrite(&v.Meta, &v.AllocationID)
		if r.member(`"ttl":`) {
			v.TTL = time.Duration(r.int(64))
		}
		return read(&r, c, v)
	}
	return false
}

// read ends the outer object and, when the whole payload was read, sets
// c to v.
func read[T any](r *fastReader, c *T, v T) bool {
	if !r.end() {
		return false
	}
	*c = v
	return true
}

// allocationWrite reads the opening brace, Meta's members and an
// allocation ID.
func (r *fastReader) allocationWrite(m *Meta, id *string) {
	r.meta(m)
	r.want(`"allocation_id":`)
	*id = r.str()
}

// fastReader reads one JSON object of a known form; ok turns false at
// the first byte it does not expect, and stays false.
type fastReader struct {
	b  []byte
	i  int
	ok bool
	// open is set after an object's brace, before its first member.
	open bool
}

// object reads the opening brace of an object.
func (r *fastReader) object() {
	if r.ok && r.i < len(r.b) && r.b[r.i] == '{' {
		r.i++
		r.open = true
		return
	}
	r.ok = false
}

// close reads the closing brace of an object.
func (r *fastReader) close() {
	if r.ok && r.i < len(r.b) && r.b[r.i] == '}' {
		r.i++
		r.open = false
		return
	}
	r.ok = false
}

// member reads the next member's name (with the comma before it) when it
// is name, given with its quotes and colon; false when the next member
// is another or the object ends.
func (r *fastReader) member(name string) bool {
	if !r.ok {
		return false
	}
	i := r.i
	if !r.open {
		if i >= len(r.b) || r.b[i] != ',' {
			return false
		}
		i++
	}
	if !r.at(i, name) {
		return false
	}
	r.i, r.open = i+len(name), false
	return true
}

// at reports whether the payload holds lit at i.
func (r *fastReader) at(i int, lit string) bool {
	return len(r.b)-i >= len(lit) && string(r.b[i:i+len(lit)]) == lit
}

// want reads the next member's name, which must be name.
func (r *fastReader) want(name string) {
	if !r.member(name) {
		r.ok = false
	}
}

// end reads the closing brace of the outer object and reports whether
// the whole payload was read.
func (r *fastReader) end() bool {
	r.close()
	return r.ok && r.i == len(r.b)
}

// str reads a string of printable ASCII without escapes.
func (r *fastReader) str() string {
	if !r.ok || r.i >= len(r.b) || r.b[r.i] != '"' {
		r.ok = false
		return ""
	}
	for j := r.i + 1; j < len(r.b); j++ {
		switch c := r.b[j]; {
		case c == '"':
			s := string(r.b[r.i+1 : j])
			r.i = j + 1
			return s
		case c < 0x20 || c > 0x7e || c == '\\':
			r.ok = false
			return ""
		}
	}
	r.ok = false
	return ""
}

// number returns the bytes of a JSON number, read by its grammar.
func (r *fastReader) number(integer bool) []byte {
	if !r.ok {
		return nil
	}
	b, i := r.b, r.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		r.ok = false
		return nil
	}
	if !integer {
		if i < len(b) && b[i] == '.' {
			if i = digits(b, i+1); i < 0 {
				r.ok = false
				return nil
			}
		}
		if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
			i++
			if i < len(b) && (b[i] == '+' || b[i] == '-') {
				i++
			}
			if i = digits(b, i); i < 0 {
				r.ok = false
				return nil
			}
		}
	} else if i < len(b) && (b[i] == '.' || b[i] == 'e' || b[i] == 'E') {
		r.ok = false
		return nil
	}
	n := b[r.i:i]
	r.i = i
	return n
}

// digits returns the index after the digits of b from i, at least one;
// -1 when there is none.
func digits(b []byte, i int) int {
	start := i
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	if i == start {
		return -1
	}
	return i
}

// int reads an integer that fits in bits.
func (r *fastReader) int(bits int) int64 {
	n := r.number(true)
	if !r.ok {
		return 0
	}
	v, err := strconv.ParseInt(string(n), 10, bits)
	if err != nil {
		r.ok = false
	}
	return v
}

// float reads a number into a float64.
func (r *fastReader) float() float64 {
	n := r.number(false)
	if !r.ok {
		return 0
	}
	v, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		r.ok = false
	}
	return v
}

// meta reads the opening brace and Meta's members.
func (r *fastReader) meta(m *Meta) {
	r.object()
	if r.member(`"request_id":`) {
		m.RequestID = r.str()
	}
	if r.member(`"namespace":`) {
		m.Namespace = r.str()
	}
	r.want(`"time":`)
	m.Time = r.int(64)
	if r.member(`"digest":`) {
		m.Digest = r.str()
	}
}

// resources reads Resources' members (inside an object already open).
func (r *fastReader) resources(v *Resources) {
	if r.member(`"memory_gb":`) {
		v.MemoryGB = r.float()
	}
	if r.member(`"compute_units":`) {
		v.ComputeUnits = r.float()
	}
	if r.member(`"storage_gb":`) {
		v.StorageGB = r.float()
	}
	if r.member(`"bandwidth_gbps":`) {
		v.BandwidthGbps = r.float()
	}
}

func (r *fastReader) request(q *Request) {
	r.object()
	r.want(`"claims":`)
	switch {
	case !r.ok:
	case r.at(r.i, "null"):
		r.i += len("null")
	case r.at(r.i, "[]"):
		r.i += len("[]")
		q.Claims = []Claim{}
	case r.at(r.i, "["):
		r.i++
		for r.ok {
			var cl Claim
			r.claim(&cl)
			q.Claims = append(q.Claims, cl)
			if r.ok && r.i < len(r.b) && r.b[r.i] == ',' {
				r.i++
				continue
			}
			if r.ok && r.i < len(r.b) && r.b[r.i] == ']' {
				r.i++
				break
			}
			r.ok = false
		}
	default:
		r.ok = false
	}
	r.want(`"priority":`)
	q.Priority = int(r.int(strconv.IntSize))
	r.want(`"timeout":`)
	q.Timeout = time.Duration(r.int(64))
	if r.member(`"lease_ttl":`) {
		q.LeaseTTL = time.Duration(r.int(64))
	}
	if r.member(`"pool":`) {
		q.Pool = r.str()
	}
	// Labels with no map: an empty object. Any label goes the long way.
	r.want(`"labels":{}`)
	if r.member(`"max_hosts":`) {
		q.MaxHosts = int(r.int(strconv.IntSize))
	}
	if r.member(`"min_per_host":`) {
		q.MinPerHost = int(r.int(strconv.IntSize))
	}
	if r.member(`"same":`) {
		q.Same = r.str()
	}
	if r.member(`"host":`) {
		q.Host = r.str()
	}
	r.close()
}

func (r *fastReader) claim(cl *Claim) {
	r.object()
	r.want(`"type":`)
	cl.Type = DeviceType(r.str())
	r.want(`"count":`)
	cl.Count = int(r.int(strconv.IntSize))
	if r.member(`"pool":`) {
		cl.Pool = r.str()
	}
	// Capabilities without custom values: only the numbers.
	r.want(`"capabilities":`)
	r.object()
	r.resources(&cl.Capabilities.Resources)
	r.close()
	r.want(`"amount":`)
	r.object()
	r.resources(&cl.Amount)
	r.close()
	if r.member(`"topology":`) {
		cl.Topology = r.str()
	}
	r.close()
}
