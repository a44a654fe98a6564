package fsm

import (
	"encoding/binary"
	"fmt"
)

// BatchType is a Batch: several allocation writes in one log entry.
const BatchType CommandType = 21

// MaxBatchCommands bounds the commands of a Batch.
const MaxBatchCommands = 1024

// Batch is several allocation writes (Allocate, Release, Renew, Cancel)
// that the leader proposes as one log entry: the writes of one
// POST /v1/batch, so that the batch costs one entry to store, send and
// apply instead of one per write (feature level 5). They apply in order
// at the entry's index, each exactly as it would alone: its own request
// ID, namespace and leader time, its own refusal, its own Result
// (Result.Batch). A Batch has no meta of its own, and nothing of it is
// kept but what its commands do. Each Allocate carries its allocation ID
// (an ID derived from the index would be the same for all of them).
//
// It is encoded without JSON around its commands, which are already
// encoded: the type byte, the number of commands, then each command as
// its length and what Encode writes for it (all as unsigned varints).
// The leader so builds the entry from the encodings it already holds
// (EncodeBatch).
type Batch struct {
	Meta
	Commands []Command
}

func (*Batch) Type() CommandType { return BatchType }

// Batchable reports whether c may be a command of a Batch.
func Batchable(c Command) bool {
	switch c.(type) {
	case *Allocate, *Release, *Renew, *Cancel:
		return true
	}
	return false
}

// EncodeBatch returns what Encode writes for a Batch of the commands
// whose encodings (Encode) are given, without decoding them again. The
// caller vouches for them: Batchable commands, at most MaxBatchCommands.
func EncodeBatch(encoded [][]byte) []byte {
	size := 1 + binary.MaxVarintLen64
	for _, e := range encoded {
		size += binary.MaxVarintLen64 + len(e)
	}
	out := make([]byte, 0, size)
	out = append(out, byte(BatchType))
	out = binary.AppendUvarint(out, uint64(len(encoded)))
	for _, e := range encoded {
		out = binary.AppendUvarint(out, uint64(len(e)))
		out = append(out, e...)
	}
	return out
}

func encodeBatch(b *Batch) ([]byte, error) {
	if err := checkBatch(len(b.Commands)); err != nil {
		return nil, err
	}
	encoded := make([][]byte, len(b.Commands))
	for i, c := range b.Commands {
		if !Batchable(c) {
			return nil, errf(ErrInvalid, "encode batch: command %d is a %T, not an allocation write", i, c)
		}
		e, err := Encode(c)
		if err != nil {
			return nil, err
		}
		encoded[i] = e
	}
	return EncodeBatch(encoded), nil
}

// decodeBatch reads what follows a Batch's type byte.
func decodeBatch(b []byte, unmarshal func([]byte, any) error) (*Batch, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, errf(ErrInvalid, "decode batch: bad command count")
	}
	if err := checkBatch(int(min(n, MaxBatchCommands+1))); err != nil {
		return nil, err
	}
	b = b[k:]
	out := &Batch{Commands: make([]Command, 0, n)}
	for i := range int(n) {
		size, k := binary.Uvarint(b)
		if k <= 0 || size > uint64(len(b)-k) {
			return nil, errf(ErrInvalid, "decode batch: command %d runs past the entry", i)
		}
		c, err := decodeWith(b[k:k+int(size)], unmarshal)
		if err != nil {
			return nil, fmt.Errorf("batch command %d: %w", i, err)
		}
		if !Batchable(c) {
			return nil, errf(ErrInvalid, "decode batch: command %d is a %T, not an allocation write", i, c)
		}
		out.Commands = append(out.Commands, c)
		b = b[k+int(size):]
	}
	if len(b) != 0 {
		return nil, errf(ErrInvalid, "decode batch: %d bytes after the last command", len(b))
	}
	return out, nil
}

func checkBatch(n int) error {
	if n < 1 || n > MaxBatchCommands {
		return errf(ErrInvalid, "a batch holds 1 to %d commands, not %d", MaxBatchCommands, n)
	}
	return nil
}

// applyBatch applies a Batch's commands in order at index idx, each as
// ApplyChanged would alone; changed is whether any of them changed the
// state.
func (s *State) applyBatch(idx uint64, b *Batch) (Result, bool) {
	out := Result{Index: idx, Batch: make([]Result, len(b.Commands))}
	changed := false
	for i, c := range b.Commands {
		var res Result
		switch a, isAlloc := c.(*Allocate); {
		case !Batchable(c):
			res = Result{Index: idx, Err: errf(ErrInvalid, "a batch holds allocation writes, not a %T", c)}
		case isAlloc && a.AllocationID == "":
			res = Result{Index: idx, Err: errf(ErrInvalid, "an allocate in a batch carries its allocation ID")}
		default:
			var ch bool
			res, ch = s.ApplyChanged(idx, c)
			changed = changed || ch
		}
		out.Batch[i] = res
	}
	return out, changed
}
