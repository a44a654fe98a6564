package api

import (
	"errors"
	"mime"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/transport"
)

// Defaults of the abuse limits in Options.
const (
	DefaultBodyTimeout         = 10 * time.Second
	DefaultSnapshotBodyTimeout = 10 * time.Minute
	// DefaultResponseTimeout bounds the writing of one answer: longer
	// than the longest blocking query or allocation wait.
	DefaultResponseTimeout = 10 * time.Minute
)

func (o *Options) fillLimitDefaults() {
	if o.MaxInFlightPerClient == 0 {
		o.MaxInFlightPerClient = max(1, o.MaxInFlight/4)
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = DefaultBodyTimeout
	}
	if o.SnapshotBodyTimeout <= 0 {
		o.SnapshotBodyTimeout = DefaultSnapshotBodyTimeout
	}
	if o.ResponseTimeout <= 0 {
		o.ResponseTimeout = DefaultResponseTimeout
	}
	if o.MaxSnapshotBytes <= 0 {
		o.MaxSnapshotBytes = transport.MaxRestoreBytes
	}
	if o.MaxSnapshotUploads <= 0 {
		o.MaxSnapshotUploads = 1
	}
}

var errBodyTimeout = &apiError{
	status: http.StatusRequestTimeout, code: wire.CodeBodyTimeout,
	msg: "the request body did not arrive in time",
}

// screen runs the checks every request gets before it takes a slot: the
// Host of a loopback-bound agent, the origin and media type of a write,
// and the deadlines of reading the body and writing the answer.
func (s *Server) screen(rt route, w http.ResponseWriter, r *http.Request) error {
	if s.opts.LoopbackOnly && !loopbackHost(r.Host) {
		return &apiError{status: http.StatusForbidden, code: wire.CodeHostNotAllowed,
			msg: "this agent listens on a loopback address and answers only Host localhost, 127.0.0.1 or [::1], not " + quoteHost(r.Host)}
	}
	rc := http.NewResponseController(w)
	now := time.Now()
	if !rt.debug { // pprof's profile and trace set their own
		_ = rc.SetWriteDeadline(now.Add(s.opts.ResponseTimeout))
	}
	if !isWrite(r.Method) || rt.debug {
		return nil
	}
	if err := sameOrigin(r); err != nil {
		return err
	}
	if err := mediaType(rt, r); err != nil {
		return err
	}
	if hasBody(r) {
		d := s.opts.BodyTimeout
		if rt.stream {
			d = s.opts.SnapshotBodyTimeout
		}
		// Not supported by a ResponseRecorder; a real connection takes it.
		_ = rc.SetReadDeadline(now.Add(d))
	}
	return nil
}

func isWrite(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodDelete || method == http.MethodPatch
}

// hasBody reports whether the request may carry a body: a length other
// than 0 (-1 is unknown, chunked).
func hasBody(r *http.Request) bool {
	return r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0
}

// mediaType refuses a write whose body is not the route's media type
// (application/json, or application/octet-stream for a snapshot). A write
// without a body may omit Content-Type; one that names another type is
// refused even without a body, so that a browser's cross-origin "simple"
// request (text/plain, a form) never acts.
func mediaType(rt route, r *http.Request) error {
	want := "application/json"
	if rt.stream {
		want = "application/octet-stream"
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		if !hasBody(r) {
			return nil
		}
		return &apiError{status: http.StatusUnsupportedMediaType, code: wire.CodeUnsupportedMediaType,
			msg: "request body without a Content-Type; send Content-Type: " + want}
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != want {
		return &apiError{status: http.StatusUnsupportedMediaType, code: wire.CodeUnsupportedMediaType,
			msg: "Content-Type " + quoteHost(ct) + " is not accepted here; send Content-Type: " + want}
	}
	return nil
}

// sameOrigin refuses a write a browser sends from a page of another
// origin: its Origin header names another host than the request's, or
// Sec-Fetch-Site says cross-site. Clients other than browsers send
// neither.
func sameOrigin(r *http.Request) error {
	if r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return errCrossOrigin
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
		return errCrossOrigin
	}
	return nil
}

var errCrossOrigin = &apiError{status: http.StatusForbidden, code: wire.CodeCrossOrigin,
	msg: "writes from a web page of another origin are refused"}

// loopbackHost reports whether a Host header names the local machine:
// localhost (or a name under .localhost), 127.0.0.0/8 or ::1, with or
// without a port. An empty Host (HTTP/1.0) passes: browsers always send
// one.
func loopbackHost(host string) bool {
	if host == "" {
		return true
	}
	h := host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	h = strings.TrimSuffix(strings.ToLower(h), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// quoteHost quotes a header value for an error message, escaped.
func quoteHost(s string) string {
	if len(s) > 100 {
		s = s[:100]
	}
	return strconv.Quote(s)
}

// isTimeout reports whether err is a read deadline passing.
func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
