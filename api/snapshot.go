package api

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
)

var errUploadBusy = &apiError{
	status: http.StatusTooManyRequests, code: wire.CodeOverloaded,
	msg: "another snapshot upload is being restored; retry when it is done",
}

// PUT /v1/snapshot
//
// The upload is spooled to a temporary file (capped by the route's body
// limit), verified by decoding it from the file, and only then handed to
// the node to restore; garbage is refused 400 bad_snapshot and nothing
// changes. The file is removed in every case. At most
// Options.MaxSnapshotUploads uploads are taken at once.
func (s *Server) restoreSnapshot(w http.ResponseWriter, r *http.Request) error {
	// A snapshot that does not begin as one is refused before anything
	// is spooled or waited for.
	body := bufio.NewReaderSize(r.Body, 4096)
	if err := checkSnapshotStart(body); err != nil {
		return err
	}
	wait := time.NewTimer(snapshotQueueWait)
	defer wait.Stop()
	select {
	case s.uploads <- struct{}{}:
		defer func() { <-s.uploads }()
	case <-wait.C:
		return errUploadBusy
	case <-r.Context().Done():
		return fmt.Errorf("%w: %w", cluster.ErrTimeout, r.Context().Err())
	}
	f, n, err := spool(body, s.opts.SnapshotDir)
	if f != nil {
		defer func() {
			_ = f.Close()
			if rmErr := os.Remove(f.Name()); rmErr != nil {
				s.log.Warn("could not remove a snapshot upload", "path", f.Name(), "error", rmErr)
			}
		}()
	}
	if err != nil {
		return err
	}
	if n == 0 {
		return badRequest("request body is empty; upload a snapshot from GET /v1/snapshot")
	}
	if err := verifySnapshot(f); err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("snapshot upload: %w", err)
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.WriteTimeout)
	defer cancel()
	if err := s.b.SnapshotRestore(ctx, bufio.NewReaderSize(f, 1<<20)); err != nil {
		return err
	}
	var idx uint64
	meta, err := s.b.Read(r.Context(), cluster.ReadOptions{}, func(*fsm.State) {})
	if err == nil {
		idx = meta.Index
		setReadMeta(w, meta)
	}
	writeJSON(w, r, http.StatusOK, wire.WriteResult{Index: idx})
	return nil
}

// snapshotQueueWait bounds how long an upload waits for another to be
// done before it is answered 429.
var snapshotQueueWait = 30 * time.Second

// checkSnapshotStart peeks at the first bytes of an upload: the node's
// snapshot header, then the format byte of a snapshot or a JSON object
// (format 1). An empty body is let through (the
// handler answers it).
func checkSnapshotStart(br *bufio.Reader) error {
	head, err := br.Peek(cluster.RaftSnapshotHeaderLen + 1)
	if len(head) == 0 {
		switch {
		case err == nil, errors.Is(err, io.EOF):
			return nil
		case isTimeout(err):
			return errBodyTimeout
		}
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return badRequest("snapshot upload ended early: %v", err)
	}
	if state, _, _ := cluster.SplitRaftSnapshot(head); len(state) < len(head) {
		head = state
	}
	for _, c := range head {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{', fsm.SnapshotVersion:
			return nil
		}
		return &fsm.Error{Code: fsm.ErrSnapshot.Code, Message: fmt.Sprintf("%s: not a dmsc snapshot (first byte %#02x)", fsm.ErrSnapshot.Message, c)}
	}
	return nil
}

// spool copies body to a new temporary file in dir (os.TempDir() when
// empty) and returns it with its length. The caller closes and removes a
// returned file, also when err is set.
func spool(body io.Reader, dir string) (*os.File, int64, error) {
	if body == nil {
		body = http.NoBody
	}
	f, err := os.CreateTemp(dir, "dmsc-snapshot-upload-*")
	if err != nil {
		return nil, 0, fmt.Errorf("snapshot upload: %w", err)
	}
	n, err := io.CopyBuffer(f, body, make([]byte, 64<<10))
	if err != nil {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			return f, n, err
		case isTimeout(err):
			return f, n, errBodyTimeout
		}
		return f, n, badRequest("snapshot upload ended early: %v", err)
	}
	return f, n, nil
}

// verifySnapshot decodes the snapshot in f from its start, as the restore
// will: a snapshot of GET /v1/snapshot (a State snapshot, with or without
// the node's header). It reads the file through a small buffer and stops
// at the first byte that cannot begin one, so that garbage costs no
// memory.
func verifySnapshot(f *os.File) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("snapshot upload: %w", err)
	}
	br := bufio.NewReaderSize(f, 64<<10)
	head, _ := br.Peek(cluster.RaftSnapshotHeaderLen)
	if state, _, _ := cluster.SplitRaftSnapshot(head); len(state) < len(head) {
		_, _ = br.Discard(len(head) - len(state))
	}
	for {
		c, err := br.ReadByte()
		if err != nil {
			return &fsm.Error{Code: fsm.ErrSnapshot.Code, Message: fsm.ErrSnapshot.Message + ": empty"}
		}
		if c == ' ' || c == '\t' || c == '\r' || c == '\n' {
			continue
		}
		if c != '{' && c != fsm.SnapshotVersion {
			return &fsm.Error{Code: fsm.ErrSnapshot.Code, Message: fmt.Sprintf("%s: not a dmsc snapshot (first byte %#02x)", fsm.ErrSnapshot.Message, c)}
		}
		_ = br.UnreadByte()
		break
	}
	_, err := fsm.Restore(br)
	return err
}
