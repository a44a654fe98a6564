package agentconfig

import (
	"errors"
	"strings"
	"testing"

	"github.com/dmsc/dmsc/internal/certs"
)

func TestTLSSettings(t *testing.T) {
	file := writeFile(t, "tls.hcl", `
tls {
  ca_file                = "/etc/dmsc/ca.pem"
  cert_file              = "/etc/dmsc/server-s1.pem"
  key_file               = "/etc/dmsc/server-s1-key.pem"
  verify_server_hostname = false
  verify_https_client    = true
}
`)
	server := []string{"-server", "-data-dir", "/d", "-bootstrap-expect", "3", "-node", "s1"}

	c, err := Load(append(server, "-config", file), env{"DMSC_TLS_VERIFY_INCOMING": "false"}.get)
	if err != nil {
		t.Fatal(err)
	}
	if !c.TLSEnabled() || c.TLSCAFile != "/etc/dmsc/ca.pem" || c.TLSKeyFile != "/etc/dmsc/server-s1-key.pem" ||
		c.TLSVerifyIncoming || c.TLSVerifyServerHostname || !c.TLSVerifyHTTPSClient {
		t.Fatalf("config = %+v", c)
	}
	cc := c.ClusterConfig("", nil, "v", nil)
	if !cc.TLSSkipVerifyIncoming || !cc.TLSSkipVerifyServerHostname {
		t.Fatalf("cluster config = %+v", cc)
	}

	// The defaults verify every peer but HTTPS clients; a flag beats the
	// file.
	c, err = Load(append(server, "-config", file, "-tls-verify-server-hostname", "-tls-verify-https-client=false"), env{}.get)
	if err != nil {
		t.Fatal(err)
	}
	if !c.TLSVerifyIncoming || !c.TLSVerifyServerHostname || c.TLSVerifyHTTPSClient {
		t.Fatalf("config = %+v", c)
	}
	c, err = Load(server, env{}.get)
	if err != nil {
		t.Fatal(err)
	}
	if c.TLSEnabled() || !c.TLSVerifyIncoming || !c.TLSVerifyServerHostname || c.TLSVerifyHTTPSClient {
		t.Fatalf("defaults = %+v", c)
	}
	if s, err := c.LoadTLS(); s != nil || err != nil {
		t.Fatalf("TLS off loads %v, %v", s, err)
	}

	for _, tc := range []struct {
		name   string
		args   []string
		errHas string
	}{
		{"cert without key", []string{"-tls-ca-file", "ca", "-tls-cert-file", "c"}, "go together"},
		{"key without cert", []string{"-tls-ca-file", "ca", "-tls-key-file", "k"}, "go together"},
		{"no CA", []string{"-tls-cert-file", "c", "-tls-key-file", "k"}, "needs the CA"},
		{"CA alone", []string{"-tls-ca-file", "ca"}, "needs the CA"},
	} {
		if _, err := Load(append(server, tc.args...), env{}.get); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.errHas) {
			t.Errorf("%s: %v, want ErrInvalid containing %q", tc.name, err, tc.errHas)
		}
	}
}

func TestLoadTLSChecksTheNodesCertificate(t *testing.T) {
	dir := t.TempDir()
	ca, caKey, err := certs.WriteCA(dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	cert := func(role certs.Role, node string) certs.Files {
		f, err := certs.WriteCert(dir, ca, caKey, certs.Request{Role: role, Node: node})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	s1, h1, h9, client := cert(certs.Server, "s1"), cert(certs.Host, "h1"), cert(certs.Host, "h9"), cert(certs.Client, "")
	server := func(node string, f certs.Files) []string {
		return []string{"-server", "-data-dir", "/d", "-bootstrap-expect", "3", "-node", node,
			"-tls-ca-file", f.CA, "-tls-cert-file", f.Cert, "-tls-key-file", f.Key}
	}
	host := func(node string, f certs.Files) []string {
		return []string{"-host", "-join", "a", "-devices", "d.json", "-node", node,
			"-tls-ca-file", f.CA, "-tls-cert-file", f.Cert, "-tls-key-file", f.Key}
	}
	for _, tc := range []struct {
		name   string
		args   []string
		errHas string // "" loads
	}{
		{"server s1", server("s1", s1), ""},
		{"host h1", host("h1", h1), ""},
		{"server and host s1", append(server("s1", s1), "-devices", "d.json"), ""},
		{"server with a host's certificate", server("h1", h1), `is the certificate of host "h1", but this node is server "h1"`},
		{"server with another server's name", server("s2", s1), `but this node is server "s2"`},
		{"host with another host's name", host("h1", h9), `is the certificate of host "h9", but this node is host "h1"`},
		{"host with a server's certificate", host("s1", s1), `but this node is host "s1"`},
		{"host with a client's certificate", host("h1", client), `is the certificate of a client`},
	} {
		c, err := Load(tc.args, env{}.get)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		s, err := c.LoadTLS()
		switch {
		case tc.errHas == "" && (err != nil || s == nil):
			t.Errorf("%s: %v", tc.name, err)
		case tc.errHas != "" && (!errors.Is(err, ErrInvalid) || !errors.Is(err, certs.ErrCert) || !strings.Contains(err.Error(), tc.errHas)):
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.errHas)
		}
	}
}
