package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/dmsc/dmsc/client/wire"
)

// AuditRecord is one write request as the audit log keeps it.
type AuditRecord struct {
	Time time.Time `json:"time"`
	// Accessor is the token's accessor ("anonymous" for none; "" while
	// ACLs are off).
	Accessor   string `json:"accessor"`
	Namespace  string `json:"namespace,omitempty"`
	Method     string `json:"method"`
	Path       string `json:"path"`
	RequestID  string `json:"request_id,omitempty"`
	Status     int    `json:"status"`
	RemoteAddr string `json:"remote_addr"`
}

// Auditor receives a record of every write request (POST, PUT, DELETE),
// carried out or refused. Audit must not block for long: it runs on the
// request's path.
type Auditor interface {
	Audit(AuditRecord)
}

// audit hands the auditor the record of a write request answered with
// status.
func (s *Server) audit(r *http.Request, w http.ResponseWriter, status int, at time.Time) {
	if s.opts.Auditor == nil || !isWrite(r.Method) {
		return
	}
	c := callerOf(r.Context())
	if c.accessor == "" && s.opts.ACLEnabled {
		// Refused before the ACL check (415, Host, origin, overload): say
		// whose token it carried all the same.
		c.accessor = s.accessorOf(r)
	}
	ns := c.namespace
	if ns == "" && r.URL.RawQuery != "" {
		ns = r.URL.Query().Get("namespace")
	}
	id := w.Header().Get(wire.HeaderRequestID)
	if id == "" {
		id = r.Header.Get(wire.HeaderRequestID)
	}
	s.opts.Auditor.Audit(AuditRecord{
		Time: at.UTC(), Accessor: c.accessor, Namespace: ns,
		Method: r.Method, Path: r.URL.Path, RequestID: id, Status: status,
		RemoteAddr: r.RemoteAddr,
	})
}

// ErrAudit wraps the errors of the audit log.
var ErrAudit = errors.New("audit log")

// AuditLog appends records as JSON lines to a file, rotated by size: when
// a line would take the file past MaxBytes it is renamed path.1 (path.1
// to path.2, and so on; path.MaxFiles is dropped) and a new file begun.
type AuditLog struct {
	path     string
	maxBytes int64
	maxFiles int
	onError  func(error)

	mu   sync.Mutex
	f    *os.File
	size int64
}

// Defaults of an AuditLog.
const (
	DefaultAuditMaxBytes = 100 << 20
	DefaultAuditMaxFiles = 5
)

// OpenAuditLog opens (appends to) the audit log at path. maxBytes ≤ 0
// takes DefaultAuditMaxBytes; maxFiles < 0 takes DefaultAuditMaxFiles (0
// keeps no rotated file). onError, optional, hears of lines that could not
// be written.
func OpenAuditLog(path string, maxBytes int64, maxFiles int, onError func(error)) (*AuditLog, error) {
	if maxBytes <= 0 {
		maxBytes = DefaultAuditMaxBytes
	}
	if maxFiles < 0 {
		maxFiles = DefaultAuditMaxFiles
	}
	if onError == nil {
		onError = func(error) {}
	}
	l := &AuditLog{path: path, maxBytes: maxBytes, maxFiles: maxFiles, onError: onError}
	if err := l.open(); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *AuditLog) open() error {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrAudit, err)
	}
	st, err := f.Stat()
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("%w: %w", ErrAudit, err)
	}
	l.f, l.size = f, st.Size()
	return nil
}

// Audit appends one record.
func (l *AuditLog) Audit(rec AuditRecord) {
	line, err := json.Marshal(rec)
	if err != nil {
		l.onError(fmt.Errorf("%w: %w", ErrAudit, err))
		return
	}
	line = append(line, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		l.onError(fmt.Errorf("%w: closed", ErrAudit))
		return
	}
	if l.size > 0 && l.size+int64(len(line)) > l.maxBytes {
		if err := l.rotate(); err != nil {
			l.onError(err)
			if l.f == nil {
				return
			}
		}
	}
	n, err := l.f.Write(line)
	l.size += int64(n)
	if err != nil {
		l.onError(fmt.Errorf("%w: %w", ErrAudit, err))
	}
}

// rotate shifts path.i to path.i+1, path to path.1, and opens a new path.
func (l *AuditLog) rotate() error {
	if err := l.f.Close(); err != nil {
		l.onError(fmt.Errorf("%w: %w", ErrAudit, err))
	}
	l.f = nil
	if l.maxFiles == 0 {
		if err := os.Remove(l.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %w", ErrAudit, err)
		}
		return l.open()
	}
	for i := l.maxFiles - 1; i >= 1; i-- {
		from := l.path + "." + strconv.Itoa(i)
		if err := os.Rename(from, l.path+"."+strconv.Itoa(i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return errors.Join(fmt.Errorf("%w: %w", ErrAudit, err), l.open())
		}
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil {
		return errors.Join(fmt.Errorf("%w: %w", ErrAudit, err), l.open())
	}
	return l.open()
}

// Close closes the file; later records are dropped.
func (l *AuditLog) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	if err != nil {
		return fmt.Errorf("%w: %w", ErrAudit, err)
	}
	return nil
}
