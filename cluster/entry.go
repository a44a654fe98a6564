package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/dmsc/dmsc/fsm"
)

// The log entry envelope. Every command the leader proposes is written
// to the Raft log as
//
//	[1] entryFormat1 | fsm.Encode(command) (type byte + JSON) | [4] CRC32C
//
// The CRC (Castagnoli, big endian) covers the format byte and the
// command. ApplyBatch checks it before decoding, and the startup check
// of the log store (integrity.go) checks every stored entry, so damage
// on disk is never applied as a different command. The node RPC still
// carries bare fsm.Encode bytes (its transport has its own integrity);
// only the leader wraps a command, right before it proposes it.
const entryFormat1 byte = 0xC1

// entryOverhead is the format byte and the CRC trailer.
const entryOverhead = 1 + 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrCorruptEntry: a log entry failed its checksum, or has no envelope.
// It is never applied; the server stops (fail-stop, see RaftFSM).
var ErrCorruptEntry = errors.New("corrupt log entry")

// EncodeLogEntry encodes a command as the leader writes it to the log.
func EncodeLogEntry(c fsm.Command) ([]byte, error) {
	payload, err := fsm.Encode(c)
	if err != nil {
		return nil, err
	}
	return wrapLogEntry(payload), nil
}

// wrapLogEntry puts an fsm.Encode'd command in the envelope.
func wrapLogEntry(payload []byte) []byte {
	out := make([]byte, 0, len(payload)+entryOverhead)
	out = append(out, entryFormat1)
	out = append(out, payload...)
	return binary.BigEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
}

// unwrapLogEntry checks the envelope and returns the command bytes. The
// error wraps ErrCorruptEntry.
func unwrapLogEntry(data []byte) ([]byte, error) {
	if len(data) < entryOverhead {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the envelope", ErrCorruptEntry, len(data))
	}
	if data[0] != entryFormat1 {
		return nil, fmt.Errorf("%w: format byte 0x%02x is not 0x%02x (an entry written before checksums, or damaged)", ErrCorruptEntry, data[0], entryFormat1)
	}
	body := data[:len(data)-4]
	want := binary.BigEndian.Uint32(data[len(data)-4:])
	if got := crc32.Checksum(body, castagnoli); got != want {
		return nil, fmt.Errorf("%w: checksum 0x%08x, stored 0x%08x", ErrCorruptEntry, got, want)
	}
	return body[1:], nil
}

// DecodeLogEntry checks a log entry's envelope and decodes its command.
// A bad envelope wraps ErrCorruptEntry; a command that does not decode is
// fsm.ErrUnknownCommand or fsm.ErrInvalid.
func DecodeLogEntry(data []byte) (fsm.Command, error) {
	payload, err := unwrapLogEntry(data)
	if err != nil {
		return nil, err
	}
	return fsm.Decode(payload)
}
