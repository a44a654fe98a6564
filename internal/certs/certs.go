// Package certs makes, loads and reads the cluster's certificates: a CA,
// certificates whose names say a node's role (server, host, client) and
// name, TLS configurations that take reloaded files without a restart, and
// the identity a verified peer's certificate proves.
//
// A certificate of role R for node N carries the DNS names "R.dmsc" and
// "N.R.dmsc" (a client's, "client.dmsc" alone), plus localhost and
// 127.0.0.1 so that a loopback cluster verifies, plus any names and IPs
// asked for. Who a peer is comes from those names, once its chain is
// verified against the cluster's CA.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"
)

// Domain is the DNS domain of the role and node names.
const Domain = "dmsc"

// Role is what a certificate lets its holder do in the cluster.
type Role string

// The roles.
const (
	Server Role = "server"
	Host   Role = "host"
	Client Role = "client"
)

// Valid reports whether r is one of the roles.
func (r Role) Valid() bool { return r == Server || r == Host || r == Client }

// RoleName is the DNS name every certificate of the role carries.
func RoleName(r Role) string { return string(r) + "." + Domain }

// NodeName is the DNS name of one node's certificate of a role.
func NodeName(r Role, node string) string { return node + "." + RoleName(r) }

// Errors.
var (
	// ErrCert is a certificate or key that cannot be made, read or used.
	ErrCert = errors.New("certificate")
)

// Default lifetimes, as Consul's: five years for the CA, one for a
// certificate.
const (
	DefaultCADays   = 5 * 365
	DefaultCertDays = 365
)

// NewCA makes a self-signed CA certificate and its key, PEM-encoded.
func NewCA(days int) (certPEM, keyPEM []byte, err error) {
	if days <= 0 {
		days = DefaultCADays
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: key: %v", ErrCert, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	ski := keyID(&key.PublicKey)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "dmsc agent CA " + serial.Text(16)[:8], Organization: []string{"dmsc"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.AddDate(0, 0, days),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		SubjectKeyId:          ski,
		AuthorityKeyId:        ski,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrCert, err)
	}
	return encode(der, key)
}

// Request says what certificate to make.
type Request struct {
	Role Role
	// Node is the node's name; required for servers and hosts.
	Node string
	// DNS and IPs are added to localhost and 127.0.0.1.
	DNS  []string
	IPs  []net.IP
	Days int
}

// NewCert makes a certificate of a role signed by the CA, and its key,
// PEM-encoded. Servers and hosts get both server and client use (they
// dial each other); clients get client use.
func NewCert(caCertPEM, caKeyPEM []byte, r Request) (certPEM, keyPEM []byte, err error) {
	if !r.Role.Valid() {
		return nil, nil, fmt.Errorf("%w: role %q is not server, host or client", ErrCert, r.Role)
	}
	if r.Role != Client && !validNode(r.Node) {
		return nil, nil, fmt.Errorf("%w: a %s certificate needs a node name of letters, digits, '-', '_' and '.' (got %q)", ErrCert, r.Role, r.Node)
	}
	ca, caKey, err := parsePair(caCertPEM, caKeyPEM)
	if err != nil {
		return nil, nil, err
	}
	if !ca.IsCA {
		return nil, nil, fmt.Errorf("%w: the signing certificate is not a CA", ErrCert)
	}
	days := r.Days
	if days <= 0 {
		days = DefaultCertDays
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: key: %v", ErrCert, err)
	}
	serial, err := newSerial()
	if err != nil {
		return nil, nil, err
	}
	names := []string{RoleName(r.Role)}
	cn := RoleName(r.Role)
	if r.Role != Client {
		cn = NodeName(r.Role, r.Node)
		names = append(names, cn)
	}
	names = append(names, "localhost")
	for _, d := range r.DNS {
		if d = strings.TrimSpace(d); d != "" && !contains(names, d) {
			names = append(names, d)
		}
	}
	ips := []net.IP{net.ParseIP("127.0.0.1")}
	for _, ip := range r.IPs {
		if ip != nil && !ip.Equal(ips[0]) {
			ips = append(ips, ip)
		}
	}
	usage := []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	if r.Role != Client {
		usage = append(usage, x509.ExtKeyUsageServerAuth)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:   serial,
		Subject:        pkix.Name{CommonName: cn, Organization: []string{"dmsc"}},
		NotBefore:      now.Add(-time.Minute),
		NotAfter:       now.AddDate(0, 0, days),
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    usage,
		DNSNames:       names,
		IPAddresses:    ips,
		SubjectKeyId:   keyID(&key.PublicKey),
		AuthorityKeyId: ca.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrCert, err)
	}
	return encode(der, key)
}

// Identity is who a verified certificate says its holder is. Node is
// empty for a client.
type Identity struct {
	Role Role
	Node string
}

// IdentityOf reads a certificate's role and node from its DNS names. A
// certificate naming more than one role, or more than one node, proves
// nothing.
func IdentityOf(cert *x509.Certificate) (Identity, bool) {
	var id Identity
	for _, name := range cert.DNSNames {
		for _, r := range []Role{Server, Host, Client} {
			if name == RoleName(r) {
				if id.Role != "" && id.Role != r {
					return Identity{}, false
				}
				id.Role = r
			}
		}
	}
	if id.Role == "" {
		return Identity{}, false
	}
	if id.Role == Client {
		return id, true
	}
	suffix := "." + RoleName(id.Role)
	for _, name := range cert.DNSNames {
		if node, ok := strings.CutSuffix(name, suffix); ok && validNode(node) {
			if id.Node != "" && id.Node != node {
				return Identity{}, false
			}
			id.Node = node
		}
	}
	if id.Node == "" {
		return Identity{}, false
	}
	return id, true
}

// PeerIdentity is the identity of the peer of a TLS connection, from its
// verified certificate; false when it sent none.
func PeerIdentity(cs *tls.ConnectionState) (Identity, bool) {
	if cs == nil || len(cs.PeerCertificates) == 0 {
		return Identity{}, false
	}
	return IdentityOf(cs.PeerCertificates[0])
}

// Files names the PEM files of a node: the CA's certificate, the node's
// certificate and its key.
type Files struct {
	CA   string
	Cert string
	Key  string
}

// material is what a Store serves.
type material struct {
	pool *x509.CertPool
	cert *tls.Certificate
}

// Store holds a node's CA and certificate, and hands out TLS
// configurations that read the latest loaded material on every new
// connection, so Reload takes effect without a restart.
type Store struct {
	files Files
	// self, when it names a role, is what this node's certificate must
	// prove at every load (LoadFor).
	self Identity
	cur  atomic.Pointer[material]
}

// Load reads the files. The CA file is required; the certificate and key
// go together and may be absent only for a client.
func Load(f Files) (*Store, error) {
	return LoadFor(f, Identity{})
}

// LoadFor is Load for a node that must be self: its certificate is
// required and must prove self's role and node name, at this load and
// at every Reload (a reload that would make the node someone else is
// refused and the loaded material stays).
func LoadFor(f Files, self Identity) (*Store, error) {
	s := &Store{files: f, self: self}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads the files again; on an error the loaded material stays.
func (s *Store) Reload() error {
	if s.files.CA == "" {
		return fmt.Errorf("%w: no CA file", ErrCert)
	}
	caPEM, err := os.ReadFile(s.files.CA)
	if err != nil {
		return fmt.Errorf("%w: CA file: %v", ErrCert, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrCert, s.files.CA)
	}
	m := &material{pool: pool}
	if (s.files.Cert == "") != (s.files.Key == "") {
		return fmt.Errorf("%w: a certificate file needs its key file and the other way round", ErrCert)
	}
	if s.files.Cert != "" {
		pair, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrCert, err)
		}
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			return fmt.Errorf("%w: %v", ErrCert, err)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			return fmt.Errorf("%w: %s is not signed by the CA in %s: %v", ErrCert, s.files.Cert, s.files.CA, err)
		}
		pair.Leaf = leaf
		m.cert = &pair
	}
	if s.self.Role != "" {
		if m.cert == nil {
			return fmt.Errorf("%w: this %s needs a certificate and its key", ErrCert, s.self.Role)
		}
		got, ok := IdentityOf(m.cert.Leaf)
		if !ok || got.Role != s.self.Role || (s.self.Node != "" && got.Node != s.self.Node) {
			return fmt.Errorf("%w: %s is the certificate of %s, but this node is %s (make one with: dmsc tls cert create -%s -node %s)",
				ErrCert, s.files.Cert, describe(got, ok), describe(s.self, true), s.self.Role, s.self.Node)
		}
	}
	s.cur.Store(m)
	return nil
}

// Identity is who this node's own certificate says it is.
func (s *Store) Identity() (Identity, bool) {
	m := s.cur.Load()
	if m.cert == nil {
		return Identity{}, false
	}
	return IdentityOf(m.cert.Leaf)
}

// ServerConfig is the configuration of a listener. With verifyClients
// set, a client must present a certificate signed by the CA (mutual TLS);
// what it may do is for the caller to decide from PeerIdentity.
func (s *Store) ServerConfig(verifyClients bool) *tls.Config {
	return s.serverConfig(verifyClients, nil)
}

// ServerConfigFor is the configuration of a listener that speaks mutual
// TLS with clients whose certificate, signed by the CA, proves want (a
// role, and a node when want.Node is set); others fail the handshake.
func (s *Store) ServerConfigFor(want Identity) *tls.Config {
	return s.serverConfig(true, &want)
}

func (s *Store) serverConfig(verifyClients bool, want *Identity) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := s.cur.Load()
			if m.cert == nil {
				return nil, fmt.Errorf("%w: no certificate to serve", ErrCert)
			}
			c := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{*m.cert}, ClientCAs: m.pool}
			if verifyClients {
				c.ClientAuth = tls.RequireAndVerifyClientCert
			}
			if want != nil {
				c.VerifyConnection = func(cs tls.ConnectionState) error {
					return s.verifyPeer(cs, *want, x509.ExtKeyUsageClientAuth)
				}
			}
			return c, nil
		},
	}
}

// ClientConfig is the configuration for dialing another node: its chain
// must lead to the CA and, when want is set, it must prove that identity
// (a role, and a node when want.Node is set). This node's certificate is
// presented when it has one.
func (s *Store) ClientConfig(want Identity) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain and the identity are checked below, against the CA
		// loaded at the time of the handshake; the dialled address says
		// nothing about who the peer is.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if m := s.cur.Load(); m.cert != nil {
				return m.cert, nil
			}
			return &tls.Certificate{}, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			return s.verifyPeer(cs, want, x509.ExtKeyUsageServerAuth)
		},
	}
}

// verifyPeer checks a peer's chain against the current CA and, when want
// names a role, its identity.
func (s *Store) verifyPeer(cs tls.ConnectionState, want Identity, usage x509.ExtKeyUsage) error {
	if len(cs.PeerCertificates) == 0 {
		return fmt.Errorf("%w: the peer sent no certificate", ErrCert)
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	leaf := cs.PeerCertificates[0]
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: s.cur.Load().pool, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
		return fmt.Errorf("%w: %v", ErrCert, err)
	}
	if want.Role == "" {
		return nil
	}
	got, ok := IdentityOf(leaf)
	if !ok || got.Role != want.Role || (want.Node != "" && got.Node != want.Node) {
		return fmt.Errorf("%w: the peer is %s, want %s", ErrCert, describe(got, ok), describe(want, true))
	}
	return nil
}

func describe(id Identity, ok bool) string {
	switch {
	case !ok:
		return "no dmsc identity"
	case id.Node == "":
		return "a " + string(id.Role)
	}
	return fmt.Sprintf("%s %q", id.Role, id.Node)
}

func validNode(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func newSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("%w: serial: %v", ErrCert, err)
	}
	return n, nil
}

func keyID(pub *ecdsa.PublicKey) []byte {
	der, _ := x509.MarshalPKIXPublicKey(pub)
	sum := sha256.Sum256(der)
	return sum[:20]
}

func encode(der []byte, key *ecdsa.PrivateKey) ([]byte, []byte, error) {
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrCert, err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

func parsePair(certPEM, keyPEM []byte) (*x509.Certificate, any, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: CA: %v", ErrCert, err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, nil, fmt.Errorf("%w: CA: %v", ErrCert, err)
	}
	return cert, pair.PrivateKey, nil
}

// The CA's file names, as `dmsc tls ca create` writes them.
const (
	CAFile    = "dmsc-agent-ca.pem"
	CAKeyFile = "dmsc-agent-ca-key.pem"
)

// WriteCA makes a CA and writes it into dir as CAFile and CAKeyFile; it
// never overwrites a file. It returns the two paths.
func WriteCA(dir string, days int) (certFile, keyFile string, err error) {
	certPEM, keyPEM, err := NewCA(days)
	if err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, CAFile), filepath.Join(dir, CAKeyFile)
	if err := writeNew(certFile, certPEM, 0o644); err != nil {
		return "", "", err
	}
	if err := writeNew(keyFile, keyPEM, 0o600); err != nil {
		os.Remove(certFile)
		return "", "", err
	}
	return certFile, keyFile, nil
}

// WriteCert makes a certificate signed by the CA in caCert and caKey and
// writes it into dir as <role>-<node>.pem and <role>-<node>-key.pem
// (a client without a node name: client-<n>.pem, the first free n); it
// never overwrites a file. The Files it returns name the CA's certificate
// and the new pair.
func WriteCert(dir, caCert, caKey string, r Request) (Files, error) {
	caPEM, err := os.ReadFile(caCert)
	if err != nil {
		return Files{}, fmt.Errorf("%w: CA file: %v", ErrCert, err)
	}
	caKeyPEM, err := os.ReadFile(caKey)
	if err != nil {
		return Files{}, fmt.Errorf("%w: CA key file: %v", ErrCert, err)
	}
	certPEM, keyPEM, err := NewCert(caPEM, caKeyPEM, r)
	if err != nil {
		return Files{}, err
	}
	base := string(r.Role) + "-" + r.Node
	if r.Node == "" {
		for n := 0; ; n++ {
			base = fmt.Sprintf("%s-%d", r.Role, n)
			if _, err := os.Stat(filepath.Join(dir, base+".pem")); errors.Is(err, os.ErrNotExist) {
				break
			}
		}
	}
	f := Files{CA: caCert, Cert: filepath.Join(dir, base+".pem"), Key: filepath.Join(dir, base+"-key.pem")}
	if err := writeNew(f.Cert, certPEM, 0o644); err != nil {
		return Files{}, err
	}
	if err := writeNew(f.Key, keyPEM, 0o600); err != nil {
		os.Remove(f.Cert)
		return Files{}, err
	}
	return f, nil
}

// writeNew writes a file that must not exist yet.
func writeNew(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCert, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("%w: %v", ErrCert, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%w: %v", ErrCert, err)
	}
	return nil
}
