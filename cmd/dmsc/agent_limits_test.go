package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// The http.Server's accept errors (descriptors run out) are logged as
// errors, not at INFO.
func TestHTTPErrorLogLevels(t *testing.T) {
	var buf bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &buf, Level: hclog.Debug})
	srv := newHTTPServer(nil, logger)
	srv.ErrorLog.Printf("http: Accept error: accept tcp [::]:4646: accept4: too many open files; retrying in 5ms")
	srv.ErrorLog.Printf("http: TLS handshake error from 127.0.0.1:5555: EOF")
	srv.ErrorLog.Printf("http: superfluous response.WriteHeader call")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines:\n%s", len(lines), buf.String())
	}
	for i, want := range []string{"[ERROR]", "[DEBUG]", "[WARN]"} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d %q: want %s", i, lines[i], want)
		}
	}
	if !strings.Contains(lines[0], "too many open files") {
		t.Errorf("accept error line %q", lines[0])
	}
}
