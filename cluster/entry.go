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
// or, for a command type above feature level 1 (fsm/versions.go), as
//
//	[1] entryFormat2 | [1] level | [1] n | [n] version | fsm.Encode(command) | [4] CRC32C
//
// where level and version are the feature level and the first dmsc
// version the command needs: a server too old to know the type can then
// say what to upgrade to (it cannot know that from its own table). The
// CRC (Castagnoli, big endian) covers everything before it. ApplyBatch
// checks it before decoding, and the startup check of the log store
// (storecheck.go) checks every stored entry, so damage on disk is never
// applied as a different command. The node RPC still carries bare
// fsm.Encode bytes (its transport has its own integrity); only the
// leader wraps a command, right before it proposes it. Commands of level
// 1 keep format 1, which every release reads.
const (
	entryFormat1 byte = 0xC1
	entryFormat2 byte = 0xC2
	// entryFormatMax: format bytes above entryFormat2 up to this one are
	// reserved for later envelopes (written by a newer dmsc), not damage.
	entryFormatMax byte = 0xCF
)

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
	return wrapCommand(c, payload), nil
}

// wrapCommand puts c, encoded as payload (fsm.Encode), in the envelope
// of the format its feature level asks for.
func wrapCommand(c fsm.Command, payload []byte) []byte {
	since, ok := fsm.CommandNeeds(c)
	if !ok || since.Level <= 1 {
		return wrapLogEntry(payload)
	}
	return wrapLogEntryLevel(payload, since)
}

// wrapLogEntry puts an fsm.Encode'd command in the envelope.
func wrapLogEntry(payload []byte) []byte {
	out := make([]byte, 0, len(payload)+entryOverhead)
	out = append(out, entryFormat1)
	out = append(out, payload...)
	return binary.BigEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
}

// wrapLogEntryLevel puts a command that needs a feature level above 1 in
// the envelope of format 2.
func wrapLogEntryLevel(payload []byte, since fsm.Since) []byte {
	v := since.Version
	if len(v) > 255 {
		v = v[:255]
	}
	out := make([]byte, 0, len(payload)+entryOverhead+2+len(v))
	out = append(out, entryFormat2, byte(min(since.Level, 255)), byte(len(v)))
	out = append(out, v...)
	out = append(out, payload...)
	return binary.BigEndian.AppendUint32(out, crc32.Checksum(out, castagnoli))
}

// unwrapLogEntry checks the envelope and returns the command bytes and
// what the command needs (zero for format 1). The error wraps
// ErrCorruptEntry, or is a *fsm.NeedsUpgradeError for an envelope of a
// newer format.
func unwrapLogEntry(data []byte) ([]byte, fsm.Since, error) {
	if len(data) < entryOverhead {
		return nil, fsm.Since{}, fmt.Errorf("%w: %d bytes, shorter than the envelope", ErrCorruptEntry, len(data))
	}
	format := data[0]
	if format < entryFormat1 || format > entryFormatMax {
		return nil, fsm.Since{}, fmt.Errorf("%w: format byte 0x%02x is not 0x%02x (an entry written before checksums, or damaged)", ErrCorruptEntry, format, entryFormat1)
	}
	body := data[:len(data)-4]
	want := binary.BigEndian.Uint32(data[len(data)-4:])
	if got := crc32.Checksum(body, castagnoli); got != want {
		return nil, fsm.Since{}, fmt.Errorf("%w: checksum 0x%08x, stored 0x%08x", ErrCorruptEntry, got, want)
	}
	switch format {
	case entryFormat1:
		return body[1:], fsm.Since{}, nil
	case entryFormat2:
		if len(body) < 3 || len(body) < 3+int(body[2])+1 {
			return nil, fsm.Since{}, fmt.Errorf("%w: format 2 header runs past the entry", ErrCorruptEntry)
		}
		since := fsm.Since{Level: int(body[1]), Version: string(body[3 : 3+int(body[2])])}
		return body[3+int(body[2]):], since, nil
	}
	// A sound entry (its checksum holds) in an envelope this binary does
	// not know: a newer dmsc wrote it.
	return nil, fsm.Since{}, &fsm.NeedsUpgradeError{Format: format}
}

// DecodeLogEntry checks a log entry's envelope and decodes its command.
// A bad envelope wraps ErrCorruptEntry; a command of a type this binary
// does not know is a *fsm.NeedsUpgradeError (matching
// fsm.ErrUnknownCommand) that says, when the entry does, which feature
// level and version it needs; a bad payload is fsm.ErrInvalid.
func DecodeLogEntry(data []byte) (fsm.Command, error) {
	payload, since, err := unwrapLogEntry(data)
	if err != nil {
		return nil, err
	}
	c, err := fsm.Decode(payload)
	var nu *fsm.NeedsUpgradeError
	if errors.As(err, &nu) {
		nu.Level, nu.Version = since.Level, since.Version
	}
	return c, err
}
