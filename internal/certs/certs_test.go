package certs

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// pki is a CA and certificates in a temporary directory.
type pki struct {
	t              *testing.T
	dir            string
	caCert, caKey  string
	otherCA, other string
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	p := &pki{t: t, dir: t.TempDir()}
	var err error
	if p.caCert, p.caKey, err = WriteCA(p.dir, 0); err != nil {
		t.Fatal(err)
	}
	otherDir := t.TempDir()
	if p.otherCA, p.other, err = WriteCA(otherDir, 0); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *pki) cert(role Role, node string) Files {
	p.t.Helper()
	f, err := WriteCert(p.dir, p.caCert, p.caKey, Request{Role: role, Node: node})
	if err != nil {
		p.t.Fatal(err)
	}
	return f
}

func (p *pki) store(f Files) *Store {
	p.t.Helper()
	s, err := Load(f)
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

func TestWriteNamesAndIdentity(t *testing.T) {
	p := newPKI(t)
	for _, tc := range []struct {
		role      Role
		node      string
		file      string
		wantNode  string
		wantNames []string
	}{
		{Server, "s1", "server-s1.pem", "s1", []string{"server.dmsc", "s1.server.dmsc", "localhost"}},
		{Host, "h1", "host-h1.pem", "h1", []string{"host.dmsc", "h1.host.dmsc", "localhost"}},
		{Client, "", "client-0.pem", "", []string{"client.dmsc", "localhost"}},
		{Client, "", "client-1.pem", "", []string{"client.dmsc", "localhost"}},
	} {
		f := p.cert(tc.role, tc.node)
		if filepath.Base(f.Cert) != tc.file || filepath.Base(f.Key) != tc.file[:len(tc.file)-4]+"-key.pem" || f.CA != p.caCert {
			t.Fatalf("%s %s: files %+v", tc.role, tc.node, f)
		}
		s := p.store(f)
		id, ok := s.Identity()
		if !ok || id.Role != tc.role || id.Node != tc.wantNode {
			t.Fatalf("%s %s: identity %+v %t", tc.role, tc.node, id, ok)
		}
		leaf := s.cur.Load().cert.Leaf
		for _, name := range tc.wantNames {
			if !contains(leaf.DNSNames, name) {
				t.Errorf("%s: names %v lack %s", tc.file, leaf.DNSNames, name)
			}
		}
		if len(leaf.IPAddresses) != 1 || !leaf.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) {
			t.Errorf("%s: IPs %v", tc.file, leaf.IPAddresses)
		}
		if info, _ := os.Stat(f.Key); info.Mode().Perm() != 0o600 {
			t.Errorf("%s: key mode %v", tc.file, info.Mode())
		}
	}
	if _, err := WriteCert(p.dir, p.caCert, p.caKey, Request{Role: Server, Node: "s1"}); !errors.Is(err, ErrCert) {
		t.Fatalf("second server-s1: %v, want a refusal to overwrite", err)
	}
	if _, _, err := WriteCA(p.dir, 0); !errors.Is(err, ErrCert) {
		t.Fatalf("second CA: %v, want a refusal to overwrite", err)
	}
	for _, r := range []Request{{Role: Server}, {Role: Host, Node: "a b"}, {Role: "admin", Node: "x"}} {
		if _, err := WriteCert(p.dir, p.caCert, p.caKey, r); !errors.Is(err, ErrCert) {
			t.Errorf("%+v: %v, want ErrCert", r, err)
		}
	}
}

func TestIdentityOfRefusesMixedNames(t *testing.T) {
	p := newPKI(t)
	f := p.cert(Server, "s1")
	leaf := p.store(f).cur.Load().cert.Leaf
	two := *leaf
	two.DNSNames = append(append([]string(nil), leaf.DNSNames...), "host.dmsc")
	if id, ok := IdentityOf(&two); ok {
		t.Fatalf("two roles gave %+v", id)
	}
	nodes := *leaf
	nodes.DNSNames = append(append([]string(nil), leaf.DNSNames...), "s2.server.dmsc")
	if id, ok := IdentityOf(&nodes); ok {
		t.Fatalf("two nodes gave %+v", id)
	}
}

// handshake runs a TLS handshake between a listener configured by srv
// and a dialer configured by cli, and returns what each side saw.
func handshake(t *testing.T, srv, cli *tls.Config) (server *tls.ConnectionState, err error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan *tls.ConnectionState, 1)
	go func() {
		sc := tls.Server(a, srv)
		if err := sc.HandshakeContext(ctx); err != nil {
			done <- nil
			return
		}
		cs := sc.ConnectionState()
		done <- &cs
	}()
	cc := tls.Client(b, cli)
	err = cc.HandshakeContext(ctx)
	if err != nil {
		b.Close()
		<-done
		return nil, err
	}
	// TLS 1.3 reports a client certificate refused by the server on the
	// first read.
	go cc.Read(make([]byte, 1))
	return <-done, nil
}

func TestMutualTLSChecksRolesAndCA(t *testing.T) {
	p := newPKI(t)
	s1 := p.store(p.cert(Server, "s1"))
	s2 := p.store(p.cert(Server, "s2"))
	h1 := p.store(p.cert(Host, "h1"))
	client := p.store(p.cert(Client, ""))
	strangerFiles, err := WriteCert(t.TempDir(), p.otherCA, p.other, Request{Role: Server, Node: "s9"})
	if err != nil {
		t.Fatal(err)
	}
	stranger := p.store(strangerFiles)

	// A server dialling a server that must be a server: yes.
	cs, err := handshake(t, s1.ServerConfig(true), s2.ClientConfig(Identity{Role: Server}))
	if err != nil || cs == nil {
		t.Fatalf("server to server: %v", err)
	}
	if id, ok := PeerIdentity(cs); !ok || id != (Identity{Server, "s2"}) {
		t.Fatalf("server saw %+v %t", id, ok)
	}
	// Dialling a host that must be h1: a server's certificate does not do.
	if _, err := handshake(t, s2.ServerConfig(true), s1.ClientConfig(Identity{Role: Host, Node: "h1"})); !errors.Is(err, ErrCert) {
		t.Fatalf("server posing as h1: %v, want ErrCert", err)
	}
	if _, err := handshake(t, h1.ServerConfig(true), s1.ClientConfig(Identity{Role: Host, Node: "h1"})); err != nil {
		t.Fatalf("h1 as h1: %v", err)
	}
	// A certificate from another CA is refused both ways.
	if cs, _ := handshake(t, s1.ServerConfig(true), stranger.ClientConfig(Identity{})); cs != nil {
		t.Fatal("the server accepted a client of another CA")
	}
	if _, err := handshake(t, stranger.ServerConfig(true), s1.ClientConfig(Identity{})); !errors.Is(err, ErrCert) {
		t.Fatalf("dialling a server of another CA: %v, want ErrCert", err)
	}
	// Without a client certificate, mutual TLS refuses; without
	// verification asked for, the client may connect.
	noCert := p.store(Files{CA: p.caCert})
	if cs, _ := handshake(t, s1.ServerConfig(true), noCert.ClientConfig(Identity{})); cs != nil {
		t.Fatal("mutual TLS accepted a client without a certificate")
	}
	if cs, err := handshake(t, s1.ServerConfig(false), noCert.ClientConfig(Identity{})); err != nil || cs == nil {
		t.Fatalf("one-way TLS: %v", err)
	}
	if cs, err := handshake(t, s1.ServerConfig(true), client.ClientConfig(Identity{Role: Server})); err != nil || cs == nil {
		t.Fatalf("client to server: %v", err)
	}
}

func TestReload(t *testing.T) {
	p := newPKI(t)
	f := p.cert(Server, "s1")
	s := p.store(f)
	// New files in place of the old: a certificate of another node.
	other := p.cert(Server, "s2")
	if err := os.Rename(other.Cert, f.Cert); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other.Key, f.Key); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if id, _ := s.Identity(); id.Node != "s2" {
		t.Fatalf("after reload the identity is %+v", id)
	}
	// A configuration made before the reload serves the new certificate.
	cfg := s.ServerConfig(true)
	peer := p.store(p.cert(Server, "s3"))
	if _, err := handshake(t, cfg, peer.ClientConfig(Identity{Role: Server, Node: "s2"})); err != nil {
		t.Fatalf("handshake after reload: %v", err)
	}
	// A broken file leaves the loaded material in place.
	if err := os.WriteFile(f.Cert, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); !errors.Is(err, ErrCert) {
		t.Fatalf("reload of garbage: %v, want ErrCert", err)
	}
	if id, _ := s.Identity(); id.Node != "s2" {
		t.Fatalf("a failed reload changed the identity to %+v", id)
	}
	// A certificate of another CA is refused at load.
	strangerFiles, err := WriteCert(t.TempDir(), p.otherCA, p.other, Request{Role: Server, Node: "s9"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Load(Files{CA: p.caCert, Cert: strangerFiles.Cert, Key: strangerFiles.Key}); !errors.Is(err, ErrCert) {
		t.Fatalf("load of a certificate of another CA: %v, want ErrCert", err)
	}
}

func TestServerConfigForChecksTheClient(t *testing.T) {
	p := newPKI(t)
	s1 := p.store(p.cert(Server, "s1"))
	s2 := p.store(p.cert(Server, "s2"))
	h1 := p.store(p.cert(Host, "h1"))
	client := p.store(p.cert(Client, ""))
	srv := s1.ServerConfigFor(Identity{Role: Server})
	if cs, err := handshake(t, srv, s2.ClientConfig(Identity{Role: Server})); err != nil || cs == nil {
		t.Fatalf("server to a listener for servers: %v", err)
	}
	for name, st := range map[string]*Store{"host": h1, "client": client, "no certificate": p.store(Files{CA: p.caCert})} {
		if cs, _ := handshake(t, srv, st.ClientConfig(Identity{Role: Server})); cs != nil {
			t.Errorf("a listener for servers accepted a %s", name)
		}
	}
	if cs, _ := handshake(t, s1.ServerConfigFor(Identity{Role: Server, Node: "s3"}), s2.ClientConfig(Identity{})); cs != nil {
		t.Error("a listener for s3 accepted s2")
	}
}

func TestLoadForChecksTheNodeAtEveryLoad(t *testing.T) {
	p := newPKI(t)
	f := p.cert(Server, "s1")
	s, err := LoadFor(f, Identity{Role: Server, Node: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []Identity{{Role: Host, Node: "s1"}, {Role: Server, Node: "s2"}} {
		if _, err := LoadFor(f, want); !errors.Is(err, ErrCert) {
			t.Errorf("server s1's certificate loaded for %+v: %v", want, err)
		}
	}
	if _, err := LoadFor(Files{CA: p.caCert}, Identity{Role: Server, Node: "s1"}); !errors.Is(err, ErrCert) {
		t.Errorf("a server loaded without a certificate: %v", err)
	}
	// A reload that would make s1 someone else is refused.
	other := p.cert(Server, "s2")
	if err := os.Rename(other.Cert, f.Cert); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(other.Key, f.Key); err != nil {
		t.Fatal(err)
	}
	if err := s.Reload(); !errors.Is(err, ErrCert) {
		t.Fatalf("reload of s2's certificate into s1: %v, want ErrCert", err)
	}
	if id, _ := s.Identity(); id.Node != "s1" {
		t.Fatalf("a refused reload changed the identity to %+v", id)
	}
}
