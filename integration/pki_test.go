package integration

import (
	"crypto/tls"
	"sync"
	"testing"

	"github.com/dmsc/dmsc/internal/certs"
)

// PKI is a cluster's CA and the certificates made from it, in a
// temporary directory of the test.
type PKI struct {
	t         testing.TB
	Dir       string
	CA, CAKey string

	mu    sync.Mutex
	files map[certs.Identity]certs.Files
}

// NewPKI makes a CA.
func NewPKI(t testing.TB) *PKI {
	t.Helper()
	p := &PKI{t: t, Dir: t.TempDir(), files: map[certs.Identity]certs.Files{}}
	var err error
	if p.CA, p.CAKey, err = certs.WriteCA(p.Dir, 0); err != nil {
		t.Fatal(err)
	}
	return p
}

// Cert returns the files of the certificate of role for node, made on
// first use.
func (p *PKI) Cert(role certs.Role, node string) certs.Files {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := certs.Identity{Role: role, Node: node}
	if f, ok := p.files[id]; ok {
		return f
	}
	f, err := certs.WriteCert(p.Dir, p.CA, p.CAKey, certs.Request{Role: role, Node: node})
	if err != nil {
		p.t.Fatal(err)
	}
	p.files[id] = f
	return f
}

// Store loads the certificate of role for node.
func (p *PKI) Store(role certs.Role, node string) *certs.Store {
	s, err := certs.Load(p.Cert(role, node))
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// AgentArgs are the TLS flags of the agent node (a server or a host).
func (p *PKI) AgentArgs(node string, server bool) []string {
	role := certs.Host
	if server {
		role = certs.Server
	}
	return TLSArgs(p.Cert(role, node))
}

// TLSArgs are an agent's flags for the files f.
func TLSArgs(f certs.Files) []string {
	return []string{"-tls-ca-file", f.CA, "-tls-cert-file", f.Cert, "-tls-key-file", f.Key}
}

// ClientTLS is the TLS of the harness's API client: a client's
// certificate, and any agent's certificate of the CA accepted.
func (p *PKI) ClientTLS() *tls.Config {
	return p.Store(certs.Client, "").ClientConfig(certs.Identity{})
}
