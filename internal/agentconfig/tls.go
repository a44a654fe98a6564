package agentconfig

import (
	"fmt"

	"github.com/dmsc/dmsc/internal/certs"
)

// TLSEnabled reports whether any TLS file is set: then all three must be
// (Validate), and Raft, the node RPC and the HTTP API speak TLS.
func (c *Config) TLSEnabled() bool {
	return c.TLSCAFile != "" || c.TLSCertFile != "" || c.TLSKeyFile != ""
}

// TLSFiles are the agent's PEM files.
func (c *Config) TLSFiles() certs.Files {
	return certs.Files{CA: c.TLSCAFile, Cert: c.TLSCertFile, Key: c.TLSKeyFile}
}

// TLSIdentity is who this agent's certificate must say it is: a server
// (a server that also carries devices included) or a host, by its node
// name.
func (c *Config) TLSIdentity() certs.Identity {
	role := certs.Host
	if c.Server {
		role = certs.Server
	}
	return certs.Identity{Role: role, Node: c.NodeName}
}

// validateTLS checks that the TLS files come together.
func (c *Config) validateTLS() error {
	if !c.TLSEnabled() {
		return nil
	}
	switch {
	case (c.TLSCertFile == "") != (c.TLSKeyFile == ""):
		return fmt.Errorf("%w: -tls-cert-file and -tls-key-file go together", ErrInvalid)
	case c.TLSCAFile == "" || c.TLSCertFile == "":
		return fmt.Errorf("%w: TLS needs the CA (-tls-ca-file), this node's certificate (-tls-cert-file) and its key (-tls-key-file)", ErrInvalid)
	}
	return nil
}

// LoadTLS loads the agent's CA, certificate and key, nil when TLS is off.
// The certificate must be signed by the CA and name this node's role and
// name (TLSIdentity), now and at every reload: an agent does not start as
// someone else.
func (c *Config) LoadTLS() (*certs.Store, error) {
	if !c.TLSEnabled() {
		return nil, nil
	}
	s, err := certs.LoadFor(c.TLSFiles(), c.TLSIdentity())
	if err != nil {
		return nil, fmt.Errorf("%w: tls: %w", ErrInvalid, err)
	}
	return s, nil
}
