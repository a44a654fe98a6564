package fsm

import "encoding/json"

// DecodeWithEncodingJSON reads a command as Decode did with encoding/json,
// for the tests that check Decode reads Encode's output the same way.
func DecodeWithEncodingJSON(b []byte) (Command, error) { return decodeWith(b, json.Unmarshal) }
