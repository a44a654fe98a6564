package agentconfig

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestLimitsAndAuditBlocks(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "agent.hcl")
	src := `
limits {
  http_max_conns_per_client = 50
  http_max_conns            = 1000
}
audit {
  enabled   = true
  path      = "` + filepath.Join(dir, "audit.log") + `"
  max_bytes = 1048576
  max_files = 3
}
`
	if err := os.WriteFile(file, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load([]string{"-dev", "-config", file}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if c.HTTPMaxConnsPerClient != 50 || c.HTTPMaxConns != 1000 || !c.AuditEnabled ||
		c.AuditMaxBytes != 1<<20 || c.AuditMaxFiles != 3 || c.AuditFile("/x") != filepath.Join(dir, "audit.log") {
		t.Fatalf("%+v", c)
	}
	// Defaults: 200 per client (Nomad's), no total, audit off.
	d, err := Load([]string{"-dev"}, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if d.HTTPMaxConnsPerClient != 200 || d.HTTPMaxConns != 0 || d.AuditEnabled || d.AuditFile("/data") != "" {
		t.Fatalf("defaults %+v", d)
	}
	d.AuditEnabled = true
	if got := d.AuditFile("/data"); got != filepath.Join("/data", "audit", "audit.log") {
		t.Fatalf("default audit file %q", got)
	}
	// Flags win; negative limits are refused.
	if _, err := Load([]string{"-dev", "-http-max-conns-per-client", "-1"}, func(string) string { return "" }); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative limit: %v", err)
	}
}
