// Package jsonappend appends JSON values byte for byte as encoding/json
// writes them. It serves the few hot paths that write the JSON of known
// types directly instead of through encoding/json's reflection (the
// answer to an allocation write, the log entry of one); each keeps a
// test that compares its output with encoding/json's on random values.
package jsonappend

import (
	"encoding/json"
	"math"
	"strconv"
)

// String appends s as encoding/json writes a string: as it is when it is
// printable ASCII with nothing to escape, else through encoding/json
// (which escapes quotes, backslashes, control characters and <, > and &
// for HTML, and replaces invalid UTF-8).
func String(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always encodes
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// Float appends f as encoding/json writes a float64; ok is false for a
// NaN or an infinity, which encoding/json refuses.
func Float(b []byte, f float64) (_ []byte, ok bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return b, false
	}
	format, abs := byte('f'), math.Abs(f)
	if abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if n := len(b); format == 'e' && n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
		// e-09 to e-9, as encoding/json does.
		b[n-2] = b[n-1]
		b = b[:n-1]
	}
	return b, true
}

// Value appends v through encoding/json; ok is false when it refuses v.
func Value(b []byte, v any) (_ []byte, ok bool) {
	m, err := json.Marshal(v)
	if err != nil {
		return b, false
	}
	return append(b, m...), true
}

// Appender appends the members of a known type's JSON; OK turns false
// at the first value encoding/json would refuse, after which what it
// holds is to be dropped.
type Appender struct {
	B  []byte
	OK bool
}

// New returns an Appender that appends to b.
func New(b []byte) Appender { return Appender{B: b, OK: true} }

// Raw appends s, JSON already.
func (a *Appender) Raw(s string) { a.B = append(a.B, s...) }

// Int appends an integer.
func (a *Appender) Int(v int64) { a.B = strconv.AppendInt(a.B, v, 10) }

// Uint appends an unsigned integer.
func (a *Appender) Uint(v uint64) { a.B = strconv.AppendUint(a.B, v, 10) }

// Str appends a string (String).
func (a *Appender) Str(s string) { a.B = String(a.B, s) }

// OptStr appends name, JSON already, and s unless s is empty, as a
// member tagged omitempty.
func (a *Appender) OptStr(name, s string) {
	if s != "" {
		a.Raw(name)
		a.Str(s)
	}
}

// OptInt appends name and v unless v is zero (omitempty).
func (a *Appender) OptInt(name string, v int64) {
	if v != 0 {
		a.Raw(name)
		a.Int(v)
	}
}

// Float appends a float64 (Float).
func (a *Appender) Float(f float64) {
	var ok bool
	if a.B, ok = Float(a.B, f); !ok {
		a.OK = false
	}
}

// Value appends v through encoding/json (Value).
func (a *Appender) Value(v any) {
	var ok bool
	if a.B, ok = Value(a.B, v); !ok {
		a.OK = false
	}
}

// OptFloat appends name, JSON already, and v unless v is zero, as a
// member tagged omitempty; first says no member precedes it in its
// object (no comma), and is cleared once it appends.
func (a *Appender) OptFloat(first *bool, name string, v float64) {
	if v == 0 {
		return
	}
	if !*first {
		a.Raw(",")
	}
	*first = false
	a.Raw(name)
	a.Float(v)
}

// OptMap appends name and m through encoding/json (which sorts the
// keys) unless m is empty, as a member tagged omitempty; first is as for
// OptFloat.
func (a *Appender) OptMap(first *bool, name string, m map[string]string) {
	if len(m) == 0 {
		return
	}
	if !*first {
		a.Raw(",")
	}
	*first = false
	a.Raw(name)
	a.Value(m)
}
