package agentconfig

import (
	"fmt"
	"path/filepath"
)

// Defaults of the limits and audit settings.
const (
	// DefaultHTTPMaxConnsPerClient is Nomad's default.
	DefaultHTTPMaxConnsPerClient = 200
	DefaultAuditMaxBytes         = 100 << 20
	DefaultAuditMaxFiles         = 5
)

type limitsBlock struct {
	HTTPMaxConnsPerClient *int `hcl:"http_max_conns_per_client,optional"`
	HTTPMaxConns          *int `hcl:"http_max_conns,optional"`
}

type auditBlock struct {
	Enabled  *bool   `hcl:"enabled,optional"`
	Path     *string `hcl:"path,optional"`
	MaxBytes *int    `hcl:"max_bytes,optional"`
	MaxFiles *int    `hcl:"max_files,optional"`
}

func (c *Config) validateLimits() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	switch {
	case c.HTTPMaxConnsPerClient < 0:
		return bad("http-max-conns-per-client is %d; want ≥ 0 (0: unlimited)", c.HTTPMaxConnsPerClient)
	case c.HTTPMaxConns < 0:
		return bad("http-max-conns is %d; want ≥ 0 (0: unlimited)", c.HTTPMaxConns)
	case c.AuditMaxBytes < 4096:
		return bad("audit-max-bytes is %d; want at least 4096", c.AuditMaxBytes)
	case c.AuditMaxFiles < 0:
		return bad("audit-max-files is %d; want ≥ 0", c.AuditMaxFiles)
	case c.AuditEnabled && c.AuditPath == "" && c.DataDir == "" && !c.Dev:
		return bad("the audit log needs -audit-path (or -data-dir)")
	}
	return nil
}

// AuditFile is the audit log's path with dataDir as the agent's data
// directory ("" when the audit log is off).
func (c *Config) AuditFile(dataDir string) string {
	switch {
	case !c.AuditEnabled:
		return ""
	case c.AuditPath != "":
		return c.AuditPath
	}
	return filepath.Join(dataDir, "audit", "audit.log")
}
