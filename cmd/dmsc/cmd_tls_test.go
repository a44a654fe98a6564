package main

import (
	"os"
	"strings"
	"testing"

	"github.com/dmsc/dmsc/internal/certs"
)

func TestTLSCreate(t *testing.T) {
	t.Chdir(t.TempDir())

	// No CA yet.
	code, _, errOut := runCLI(t, "tls", "cert", "create", "-server", "-node", "s1")
	if code != exitError || !strings.Contains(errOut, "dmsc tls ca create") {
		t.Fatalf("cert before the CA: exit %d, %q", code, errOut)
	}
	code, out, errOut := runCLI(t, "tls", "ca", "create")
	if code != exitOK || !strings.Contains(out, certs.CAFile) || !strings.Contains(out, certs.CAKeyFile) || !strings.Contains(out, "Valid until") {
		t.Fatalf("ca create: exit %d, %q %q", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, "tls", "ca", "create"); code != exitError || !strings.Contains(errOut, "exists") {
		t.Fatalf("a second ca create: exit %d, %q", code, errOut)
	}

	for _, tc := range []struct {
		args []string
		file string
		want certs.Identity
		out  []string
	}{
		{[]string{"-server", "-node", "s1", "-ip", "10.0.0.11,10.0.0.12", "-dns", "s1.example.com"}, "server-s1",
			certs.Identity{Role: certs.Server, Node: "s1"}, []string{`server "s1"`, "s1.server.dmsc", "s1.example.com", "10.0.0.12"}},
		{[]string{"-host", "-node", "h1"}, "host-h1", certs.Identity{Role: certs.Host, Node: "h1"}, []string{`host "h1"`, "h1.host.dmsc"}},
		{[]string{"-client"}, "client-0", certs.Identity{Role: certs.Client}, []string{"a client", "client.dmsc"}},
	} {
		code, out, errOut := runCLI(t, append([]string{"tls", "cert", "create"}, tc.args...)...)
		if code != exitOK {
			t.Fatalf("cert create %v: exit %d, %q", tc.args, code, errOut)
		}
		for _, s := range append(tc.out, tc.file+".pem", tc.file+"-key.pem") {
			if !strings.Contains(out, s) {
				t.Errorf("cert create %v: output lacks %q:\n%s", tc.args, s, out)
			}
		}
		st, err := certs.LoadFor(certs.Files{CA: certs.CAFile, Cert: tc.file + ".pem", Key: tc.file + "-key.pem"}, tc.want)
		if err != nil {
			t.Fatalf("cert create %v: %v", tc.args, err)
		}
		if id, _ := st.Identity(); id != tc.want {
			t.Errorf("cert create %v: identity %+v", tc.args, id)
		}
	}
	if fi, err := os.Stat("server-s1-key.pem"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("key file mode: %v %v", fi, err)
	}

	for _, tc := range []struct {
		args   []string
		errHas string
	}{
		{nil, "exactly one of -server, -host and -client"},
		{[]string{"-server", "-host", "-node", "x"}, "exactly one"},
		{[]string{"-host"}, "needs -node"},
		{[]string{"-server", "-node", "s2", "-ip", "ten"}, `-ip "ten" is not an IP address`},
		{[]string{"-client", "-days", "0"}, "-days must be positive"},
		{[]string{"-client", "extra"}, "takes no arguments"},
		{[]string{"-nope"}, "flag provided but not defined"},
	} {
		code, _, errOut := runCLI(t, append([]string{"tls", "cert", "create"}, tc.args...)...)
		if code != exitUsage || !strings.Contains(errOut, tc.errHas) {
			t.Errorf("cert create %v: exit %d, %q; want usage with %q", tc.args, code, errOut, tc.errHas)
		}
	}
	if code, _, errOut := runCLI(t, "tls", "cert", "create", "-host", "-node", "h1"); code != exitError || !strings.Contains(errOut, "exists") {
		t.Errorf("a second certificate for h1: exit %d, %q", code, errOut)
	}
	if code, out, _ := runCLI(t, "tls", "cert", "create", "-h"); code != exitOK || !strings.Contains(out, "Usage: dmsc tls cert create") {
		t.Errorf("help: exit %d, %q", code, out)
	}
}
