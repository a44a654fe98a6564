package client

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Environment variables of the TLS settings, used when Config.TLS is nil.
const (
	CACertEnv        = "DMSC_CACERT"
	ClientCertEnv    = "DMSC_CLIENT_CERT"
	ClientKeyEnv     = "DMSC_CLIENT_KEY"
	TLSServerNameEnv = "DMSC_TLS_SERVER_NAME"
)

// TLSConfig secures the connections to nodes whose API serves HTTPS (an
// agent with TLS on). An address given without a scheme is then taken as
// https://, and no address at all as https://127.0.0.1:4646.
type TLSConfig struct {
	// CACert is a PEM file of the CA the nodes' certificates must be
	// signed by (dmsc-agent-ca.pem); empty trusts the system's roots.
	CACert string
	// ClientCert and ClientKey are PEM files of the certificate this
	// client presents (dmsc tls cert create -client), for agents that
	// require one (verify_https_client). Both or neither.
	ClientCert string
	ClientKey  string
	// ServerName is the name the nodes' certificates must carry instead
	// of the dialed address, e.g. "server.dmsc" (every server's
	// certificate has it) when the addresses are not in the certificates.
	ServerName string
	// Config, when set, is used as it is; the fields above are ignored.
	Config *tls.Config
}

// tlsFromEnv is the TLS configuration of the DMSC_* variables, nil when
// none is set.
func tlsFromEnv() *TLSConfig {
	t := &TLSConfig{
		CACert:     os.Getenv(CACertEnv),
		ClientCert: os.Getenv(ClientCertEnv),
		ClientKey:  os.Getenv(ClientKeyEnv),
		ServerName: os.Getenv(TLSServerNameEnv),
	}
	if *t == (TLSConfig{}) {
		return nil
	}
	return t
}

// TLSClientConfig builds the *tls.Config of t (Config itself when set),
// reading the files.
func (t *TLSConfig) TLSClientConfig() (*tls.Config, error) {
	if t.Config != nil {
		return t.Config, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CACert != "" {
		pem, err := os.ReadFile(t.CACert)
		if err != nil {
			return nil, fmt.Errorf("dmsc client: CA certificate: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("dmsc client: CA certificate %s holds no PEM certificate", t.CACert)
		}
		c.RootCAs = pool
	}
	if (t.ClientCert == "") != (t.ClientKey == "") {
		return nil, fmt.Errorf("dmsc client: a client certificate needs its key and the other way round")
	}
	if t.ClientCert != "" {
		pair, err := tls.LoadX509KeyPair(t.ClientCert, t.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("dmsc client: client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}
