package main

import (
	"bytes"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/internal/agentconfig"
	"github.com/dmsc/dmsc/internal/connlimit"
)

// HTTP server timeouts. There is no server-wide ReadTimeout or
// WriteTimeout: a blocking query or a waiting allocation answers after
// minutes, and a snapshot upload reads for longer than a request body
// should, so package api sets per-request body and answer deadlines
// (api.Options.BodyTimeout, ResponseTimeout).
const (
	httpReadHeaderTimeout = 10 * time.Second
	httpIdleTimeout       = 60 * time.Second
)

// httpExtras are what the agent adds to the API's options beyond its
// configuration.
type httpExtras struct {
	// ready reports extra conditions of this agent.
	ready func() bool
	// loopbackOnly: the listener is bound to a loopback address.
	loopbackOnly bool
	// snapshotDir is where snapshot uploads are spooled.
	snapshotDir string
	auditor     api.Auditor
}

// newHTTPServer is the agent's http.Server over h, with its timeouts and
// an error log whose levels say what happened.
func newHTTPServer(h http.Handler, logger hclog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		IdleTimeout:       httpIdleTimeout,
		ErrorLog:          log.New(&httpErrorWriter{log: logger}, "", 0),
	}
}

// httpErrorWriter passes the http.Server's error lines to the logger at a
// level of their own: failing to accept a connection (file descriptors
// run out) is an error, a client's TLS handshake failing is a debug line,
// the rest are warnings. (hclog's inferred levels would log them all at
// INFO.)
type httpErrorWriter struct{ log hclog.Logger }

func (w *httpErrorWriter) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(bytes.TrimPrefix(p, []byte("http: "))))
	switch {
	case strings.Contains(msg, "Accept error"), strings.Contains(msg, "too many open files"):
		w.log.Error("cannot accept connections", "error", msg)
	case strings.Contains(msg, "TLS handshake error"):
		w.log.Debug("client connection failed", "error", msg)
	default:
		w.log.Warn(msg)
	}
	return len(p), nil
}

// limitListener bounds the API's connections per client address and in
// all (limits { http_max_conns_per_client, http_max_conns }). A plain-text
// listener answers a refused connection 429 before closing it; under TLS
// it is closed at once.
func limitListener(ln net.Listener, cfg *agentconfig.Config, tls bool, logger hclog.Logger) net.Listener {
	if cfg.HTTPMaxConnsPerClient <= 0 && cfg.HTTPMaxConns <= 0 {
		return ln
	}
	var lastLog time.Time
	opts := connlimit.Options{
		PerClient: cfg.HTTPMaxConnsPerClient,
		Total:     cfg.HTTPMaxConns,
		OnRefuse: func(addr net.Addr, perClient bool) {
			// At most one line a second: the refusals may come by thousands.
			if now := time.Now(); now.Sub(lastLog) >= time.Second {
				lastLog = now
				logger.Warn("HTTP connection refused: over the limit", "client", addr.String(), "per_client", perClient,
					"http_max_conns_per_client", cfg.HTTPMaxConnsPerClient, "http_max_conns", cfg.HTTPMaxConns)
			}
		},
	}
	if !tls {
		opts.Refuse = connlimit.HTTP429
	}
	return connlimit.Wrap(ln, opts)
}

// isLoopbackListener reports whether ln accepts only from this machine.
func isLoopbackListener(ln net.Listener) bool {
	ta, ok := ln.Addr().(*net.TCPAddr)
	return ok && ta.IP.IsLoopback()
}

// openAudit opens the audit log when the configuration enables it; nil
// and a no-op close otherwise.
func openAudit(cfg *agentconfig.Config, dataDir string, logger hclog.Logger) (api.Auditor, func(), error) {
	path := cfg.AuditFile(dataDir)
	if path == "" {
		return nil, func() {}, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, nil, fmt.Errorf("audit log: %w", err)
	}
	var lastLog time.Time
	al, err := api.OpenAuditLog(path, int64(cfg.AuditMaxBytes), cfg.AuditMaxFiles, func(err error) {
		if now := time.Now(); now.Sub(lastLog) >= time.Second {
			lastLog = now
			logger.Error("audit log write failed", "path", path, "error", err)
		}
	})
	if err != nil {
		return nil, nil, err
	}
	logger.Info("audit log", "path", path, "max_bytes", cfg.AuditMaxBytes, "max_files", cfg.AuditMaxFiles)
	return al, func() {
		if err := al.Close(); err != nil {
			logger.Warn("audit log close", "error", err)
		}
	}, nil
}
