package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/dmsc/dmsc/client/wire"
)

func TestSafeText(t *testing.T) {
	for in, want := range map[string]string{
		"plain":             "plain",
		"tab\tand\nnewline": "tab\tand\nnewline",
		"\x1b[2Jcleared":    `\x1b[2Jcleared`,
		"bell\a":            `bell\x07`,
		"del\x7f":           `del\x7f`,
		"bad \xff utf8":     `bad \xff utf8`,
		"c1 \u009b31m":      `c1 \u009b31m`,
		"bidi \u202eevil":   `bidi \u202eevil`,
		"ünïcödé ok, GPU ✓": "ünïcödé ok, GPU ✓",
		"cr\roverwrite":     `cr\x0doverwrite`,
	} {
		if got := safeText(in); got != want {
			t.Errorf("safeText(%q) = %q, want %q", in, got, want)
		}
	}
}

// A server that answers IDs with escape sequences (not dmsc: dmsc refuses
// them) cannot clear the screen of `dmsc device list` or `dmsc host
// list`.
func TestCLINeverPrintsControlCharacters(t *testing.T) {
	evil := "g\x1b[2J\x1b]0;pwned\x07"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/v1/devices":
			_ = json.NewEncoder(w).Encode([]wire.Device{{DeviceSpec: wire.DeviceSpec{ID: evil, Type: "GPU", Name: "A100\xff", Pool: "default"}, Host: "h\x1b[31m", Status: "available"}})
		case "/v1/hosts":
			_ = json.NewEncoder(w).Encode([]wire.Host{{ID: "h\x1b[2J", Address: "10.0.0.1", Labels: map[string]string{"rack": "\x1b[5m"}}})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	t.Setenv("DMSC_ADDR", srv.URL)
	for _, args := range [][]string{{"device", "list"}, {"host", "list"}} {
		code, out, errOut := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errOut)
		}
		if strings.ContainsAny(out+errOut, "\x1b\x07") || !strings.Contains(out, `\x1b[2J`) {
			t.Fatalf("%v printed %q", args, out)
		}
	}
}
