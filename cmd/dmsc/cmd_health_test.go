package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hashicorp/cli"

	"github.com/dmsc/dmsc/internal/certs"
)

func TestLocalAgentAddress(t *testing.T) {
	for _, tc := range []struct{ listen, want string }{
		{"", "127.0.0.1:4646"},
		{"0.0.0.0:4646", "127.0.0.1:4646"},
		{"[::]:8080", "127.0.0.1:8080"},
		{":9000", "127.0.0.1:9000"},
		{"10.0.0.11:4646", "10.0.0.11:4646"},
		{"[fd00::1]:4646", "[fd00::1]:4646"},
		{"not an address", "127.0.0.1:4646"},
	} {
		if got := localAgentAddress(tc.listen); got != tc.want {
			t.Errorf("localAgentAddress(%q) = %q, want %q", tc.listen, got, tc.want)
		}
	}
}

func TestCheckReady(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/ready/v1/ready":
			w.Write([]byte(`{"id":"s1","server":true,"state":"Follower","leader":"s2","known_leader":true,"commit_index":9,"applied_index":9,"term":2,"ready":true}`))
		case "/notready/v1/ready":
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"id":"s1","server":true,"state":"Candidate","known_leader":false,"term":3,"ready":false}`))
		case "/live/v1/health":
			w.Write([]byte(`{"status":"ok","node":"s1"}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name   string
		args   []string
		status int
		out    string
	}{
		{"ready", []string{"-address", srv.URL + "/ready"}, 0, "ready: s1 Follower term 2, leader s2, applied 9 of 9"},
		{"not ready", []string{"-address", srv.URL + "/notready"}, 1, "answered 503: s1 Candidate term 3, leader none"},
		{"live", []string{"-live", "-address", srv.URL + "/live"}, 0, `ok: {"status":"ok","node":"s1"}`},
		{"live on a ready-only path", []string{"-live", "-address", srv.URL + "/ready"}, 1, "answered 404"},
		{"nothing listens", []string{"-address", "http://127.0.0.1:1", "-timeout", "1s"}, 1, "not ready:"},
		{"bad flag", []string{"-nope"}, 1, "Usage: dmsc check-ready"},
		{"arguments", []string{"extra"}, 1, "takes no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			c := &checkReadyCommand{ui: &cli.BasicUi{Writer: &out, ErrorWriter: &errOut}}
			if got := c.Run(tc.args); got != tc.status {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", got, tc.status, out.String(), errOut.String())
			}
			if all := out.String() + errOut.String(); !strings.Contains(all, tc.out) {
				t.Fatalf("output %q does not contain %q", all, tc.out)
			}
		})
	}
}

func TestCheckReadyOverHTTPS(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, err := certs.WriteCA(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	files, err := certs.WriteCert(dir, ca, caKey, certs.Request{Role: certs.Server, Node: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	store, err := certs.Load(files)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"id":"s1","server":true,"state":"Leader","leader":"s1","known_leader":true,"commit_index":3,"applied_index":3,"term":2,"ready":true}`))
	}))
	srv.TLS = store.ServerConfig(true) // the agent's own certificate is presented as a client's
	srv.StartTLS()
	defer srv.Close()
	hostPort := strings.TrimPrefix(srv.URL, "https://")

	run := func(args ...string) (int, string) {
		var out, errOut bytes.Buffer
		c := &checkReadyCommand{ui: &cli.BasicUi{Writer: &out, ErrorWriter: &errOut}}
		return c.Run(args), out.String() + errOut.String()
	}
	// The agent's own settings make the probe speak HTTPS.
	t.Setenv("DMSC_HTTP_ADDR", hostPort)
	t.Setenv("DMSC_TLS_CA_FILE", ca)
	t.Setenv("DMSC_TLS_CERT_FILE", files.Cert)
	t.Setenv("DMSC_TLS_KEY_FILE", files.Key)
	if code, out := run(); code != 0 || !strings.Contains(out, "ready: s1 Leader") {
		t.Fatalf("with the agent's TLS settings: exit %d, %q", code, out)
	}
	// Without a client certificate the agent refuses the probe.
	t.Setenv("DMSC_TLS_CERT_FILE", "")
	t.Setenv("DMSC_TLS_KEY_FILE", "")
	if code, out := run(); code != 1 {
		t.Fatalf("without a client certificate: exit %d, %q", code, out)
	}
	// The CLI's flags win over the agent's settings.
	if code, out := run("-address", hostPort, "-ca-cert", ca, "-client-cert", files.Cert, "-client-key", files.Key); code != 0 {
		t.Fatalf("with flags: exit %d, %q", code, out)
	}
}
