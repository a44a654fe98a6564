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
