package fsm

import "encoding/json"

// DecodeWithEncodingJSON reads a command as Decode did with encoding/json,
// for the tests that check Decode reads Encode's output the same way.
func DecodeWithEncodingJSON(b []byte) (Command, error) {
	if len(b) == 0 {
		return nil, errf(ErrInvalid, "empty command")
	}
	c := newCommand(CommandType(b[0]))
	if c == nil {
		return nil, &NeedsUpgradeError{Type: CommandType(b[0])}
	}
	if err := json.Unmarshal(b[1:], c); err != nil {
		return nil, errf(ErrInvalid, "decode command type %d: %v", b[0], err)
	}
	return c, nil
}
