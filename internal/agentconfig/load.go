package agentconfig

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
)

// maxConfigFileBytes caps a config file.
const maxConfigFileBytes = 1 << 20

// fileConfig is the config file's schema. Every key maps to the Setting
// whose File is its dotted path; absent keys are nil.
type fileConfig struct {
	NodeName          *string      `hcl:"node_name,optional"`
	DataDir           *string      `hcl:"data_dir,optional"`
	BindAddr          *string      `hcl:"bind_addr,optional"`
	AdvertiseAddr     *string      `hcl:"advertise_addr,optional"`
	HTTPAddr          *string      `hcl:"http_addr,optional"`
	LogLevel          *string      `hcl:"log_level,optional"`
	LogJSON           *bool        `hcl:"log_json,optional"`
	EnableDebug       *bool        `hcl:"enable_debug,optional"`
	Join              *[]string    `hcl:"join,optional"`
	RetryInterval     *string      `hcl:"retry_interval,optional"`
	ReconnectInterval *string      `hcl:"reconnect_interval,optional"`
	Encrypt           *string      `hcl:"encrypt,optional"`
	KeyringFile       *string      `hcl:"keyring_file,optional"`
	Ports             *portsBlock  `hcl:"ports,block"`
	Server            *serverBlock `hcl:"server,block"`
	Gossip            *gossipBlock `hcl:"gossip,block"`
	Host              *hostBlock   `hcl:"host,block"`
	TLS               *tlsBlock    `hcl:"tls,block"`
	ACL               *aclBlock    `hcl:"acl,block"`
	Limits            *limitsBlock `hcl:"limits,block"`
	Audit             *auditBlock  `hcl:"audit,block"`
}

type aclBlock struct {
	Enabled   *bool   `hcl:"enabled,optional"`
	Token     *string `hcl:"token,optional"`
	TokenFile *string `hcl:"token_file,optional"`
}

type portsBlock struct {
	Raft   *int `hcl:"raft,optional"`
	RPC    *int `hcl:"rpc,optional"`
	Gossip *int `hcl:"gossip,optional"`
}

type serverBlock struct {
	Enabled            *bool   `hcl:"enabled,optional"`
	BootstrapExpect    *int    `hcl:"bootstrap_expect,optional"`
	HeartbeatTimeout   *string `hcl:"heartbeat_timeout,optional"`
	ElectionTimeout    *string `hcl:"election_timeout,optional"`
	LeaderLeaseTimeout *string `hcl:"leader_lease_timeout,optional"`
	CommitTimeout      *string `hcl:"commit_timeout,optional"`
	SnapshotThreshold  *int    `hcl:"snapshot_threshold,optional"`
	SnapshotInterval   *string `hcl:"snapshot_interval,optional"`
	TrailingLogs       *int    `hcl:"trailing_logs,optional"`
	StateHashInterval  *int    `hcl:"state_hash_interval,optional"`
	SnapshotRetain     *int    `hcl:"snapshot_retain,optional"`
	TickInterval       *string `hcl:"tick_interval,optional"`
	ReconcileInterval  *string `hcl:"reconcile_interval,optional"`
	DeadServerGrace    *string `hcl:"dead_server_grace,optional"`
	StabilizationTime  *string `hcl:"stabilization_time,optional"`
	HostDownGrace      *string `hcl:"host_down_grace,optional"`
	NoLeaderHold       *string `hcl:"no_leader_hold,optional"`
	RequestTimeout     *string `hcl:"request_timeout,optional"`
}

type gossipBlock struct {
	ProbeInterval *string `hcl:"probe_interval,optional"`
	SuspicionMult *int    `hcl:"suspicion_mult,optional"`
}

type hostBlock struct {
	Enabled           *bool              `hcl:"enabled,optional"`
	DevicesFile       *string            `hcl:"devices_file,optional"`
	Discover          *[]string          `hcl:"discover,optional"`
	NVIDIASMI         *string            `hcl:"nvidia_smi,optional"`
	ReserveMemoryGB   *float64           `hcl:"reserve_memory_gb,optional"`
	Labels            *map[string]string `hcl:"labels,optional"`
	InventoryInterval *string            `hcl:"inventory_interval,optional"`
}

type tlsBlock struct {
	CAFile               *string `hcl:"ca_file,optional"`
	CertFile             *string `hcl:"cert_file,optional"`
	KeyFile              *string `hcl:"key_file,optional"`
	VerifyIncoming       *bool   `hcl:"verify_incoming,optional"`
	VerifyServerHostname *bool   `hcl:"verify_server_hostname,optional"`
	VerifyHTTPSClient    *bool   `hcl:"verify_https_client,optional"`
}

// Load builds the agent configuration from the agent's arguments, the
// environment (read through getenv) and the config files named by -config
// (or DMSC_CONFIG when no -config is given). Precedence, lowest first:
// defaults, what -dev implies, config files in order, environment, flags.
// A -help argument returns flag.ErrHelp.
func Load(args []string, getenv func(string) string) (*Config, error) {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dev := fs.Bool("dev", false, "")
	var files []string
	fs.Func("config", "", func(v string) error { files = append(files, v); return nil })
	type flagValue struct {
		s Setting
		v string
	}
	var given []flagValue
	for _, s := range Settings {
		s := s
		record := func(v string) error { given = append(given, flagValue{s, v}); return nil }
		if s.isBool() {
			fs.BoolFunc(s.Flag, s.Usage, record)
		} else {
			fs.Func(s.Flag, s.Usage, record)
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected argument %q (flags start with -)", ErrInvalid, fs.Arg(0))
	}

	c := Default()
	if *dev {
		c.applyDev()
	}
	if len(files) == 0 && getenv("DMSC_CONFIG") != "" {
		files = splitList([]string{getenv("DMSC_CONFIG")})
	}
	for _, path := range files {
		if err := c.loadFile(path); err != nil {
			return nil, err
		}
		c.ConfigFiles = append(c.ConfigFiles, path)
	}
	for _, s := range Settings {
		v, ok := lookupEnv(getenv, s.Env)
		if !ok {
			continue
		}
		if err := s.set(&c, []string{v}); err != nil {
			return nil, fmt.Errorf("%w: environment %s: %v", ErrInvalid, s.Env, err)
		}
	}
	// Flags last; a list flag given several times collects every value.
	byFlag := map[string][]string{}
	var order []Setting
	for _, g := range given {
		if _, seen := byFlag[g.s.Flag]; !seen {
			order = append(order, g.s)
		}
		byFlag[g.s.Flag] = append(byFlag[g.s.Flag], g.v)
	}
	for _, s := range order {
		if err := s.set(&c, byFlag[s.Flag]); err != nil {
			return nil, fmt.Errorf("%w: -%s: %v", ErrInvalid, s.Flag, err)
		}
	}
	if err := c.readTokenFile(); err != nil {
		return nil, err
	}
	// An inventory source makes the agent a host.
	if c.DevicesFile != "" || len(c.Discover) > 0 {
		c.Host = true
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// maxTokenFileBytes caps an ACL token file.
const maxTokenFileBytes = 4 << 10

// readTokenFile sets ACLToken from ACLTokenFile, when one is named: its
// content without surrounding white space (a final newline), which must
// not be empty. A token given both ways is refused.
func (c *Config) readTokenFile() error {
	if c.ACLTokenFile == "" {
		return nil
	}
	if c.ACLToken != "" {
		return fmt.Errorf("%w: acl token and token_file (-acl-token, -acl-token-file) exclude each other", ErrInvalid)
	}
	f, err := os.Open(c.ACLTokenFile)
	if err != nil {
		return fmt.Errorf("%w: acl token_file: %w", ErrInvalid, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxTokenFileBytes+1))
	if err != nil {
		return fmt.Errorf("%w: acl token_file %s: %w", ErrInvalid, c.ACLTokenFile, err)
	}
	if len(data) > maxTokenFileBytes {
		return fmt.Errorf("%w: acl token_file %s is larger than %d bytes", ErrInvalid, c.ACLTokenFile, maxTokenFileBytes)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return fmt.Errorf("%w: acl token_file %s is empty", ErrInvalid, c.ACLTokenFile)
	}
	if strings.ContainsAny(tok, " \t\r\n") {
		return fmt.Errorf("%w: acl token_file %s holds more than one line or word", ErrInvalid, c.ACLTokenFile)
	}
	c.ACLToken = tok
	return nil
}

// lookupEnv reads an environment variable; an empty value counts as unset.
func lookupEnv(getenv func(string) string, name string) (string, bool) {
	v := getenv(name)
	return v, v != ""
}

// loadFile applies one config file: HCL, or JSON when the name ends in .json.
func (c *Config) loadFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("%w: config file: %v", ErrInvalid, err)
	}
	defer f.Close()
	src, err := io.ReadAll(io.LimitReader(f, maxConfigFileBytes+1))
	if err != nil {
		return fmt.Errorf("%w: config file %s: %v", ErrInvalid, path, err)
	}
	if len(src) > maxConfigFileBytes {
		return fmt.Errorf("%w: config file %s is larger than %d bytes", ErrInvalid, path, maxConfigFileBytes)
	}
	p := hclparse.NewParser()
	var file *hcl.File
	var diags hcl.Diagnostics
	if strings.EqualFold(filepath.Ext(path), ".json") {
		file, diags = p.ParseJSON(src, path)
	} else {
		file, diags = p.ParseHCL(src, path)
	}
	if diags.HasErrors() {
		return fmt.Errorf("%w: %s", ErrInvalid, diagText(diags))
	}
	var fc fileConfig
	if diags := gohcl.DecodeBody(file.Body, nil, &fc); diags.HasErrors() {
		return fmt.Errorf("%w: %s", ErrInvalid, diagText(diags))
	}
	for _, kv := range fileValues(reflect.ValueOf(fc), "") {
		s, ok := settingByFile(kv.key)
		if !ok {
			return fmt.Errorf("%w: %s: key %s has no setting", ErrInvalid, path, kv.key)
		}
		if err := s.set(c, kv.vals); err != nil {
			return fmt.Errorf("%w: %s: %s: %v", ErrInvalid, path, kv.key, err)
		}
	}
	return nil
}

// diagText is the errors of diags, one per line, each with file:line:col.
func diagText(diags hcl.Diagnostics) string {
	var lines []string
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		msg := d.Summary
		if d.Detail != "" {
			msg += ": " + d.Detail
		}
		if d.Subject != nil {
			msg = fmt.Sprintf("%s:%d,%d: %s", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column, msg)
		}
		lines = append(lines, msg)
	}
	return strings.Join(lines, "; ")
}

type keyValues struct {
	key  string
	vals []string
}

// fileValues lists the keys set in a decoded file struct with their values
// as strings, in struct order.
func fileValues(v reflect.Value, prefix string) []keyValues {
	var out []keyValues
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		name, kind, _ := strings.Cut(t.Field(i).Tag.Get("hcl"), ",")
		fv := v.Field(i)
		if fv.IsNil() {
			continue
		}
		if kind == "block" {
			out = append(out, fileValues(fv.Elem(), prefix+name+".")...)
			continue
		}
		var vals []string
		switch x := fv.Interface().(type) {
		case *string:
			vals = []string{*x}
		case *bool:
			vals = []string{strconv.FormatBool(*x)}
		case *int:
			vals = []string{strconv.Itoa(*x)}
		case *float64:
			vals = []string{strconv.FormatFloat(*x, 'g', -1, 64)}
		case *[]string:
			vals = append([]string{}, *x...)
		case *map[string]string:
			keys := make([]string, 0, len(*x))
			for k := range *x {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				vals = append(vals, k+"="+(*x)[k])
			}
		}
		out = append(out, keyValues{prefix + name, vals})
	}
	return out
}

// Usage is the help text of the agent's flags, with each setting's
// environment variable and file key.
func Usage() string {
	var b strings.Builder
	b.WriteString("  -dev\n      Run a one-node cluster with a sample inventory and temporary storage.\n")
	b.WriteString("  -config FILE\n      Read a config file (HCL, or JSON when it ends in .json); repeatable. Env: DMSC_CONFIG\n")
	for _, s := range Settings {
		arg := ""
		switch s.field(&Config{}).(type) {
		case *string:
			arg = " VALUE"
		case *int, *uint64:
			arg = " N"
		case *float64:
			arg = " NUMBER"
		case *time.Duration:
			arg = " DURATION"
		case *[]string:
			arg = " LIST"
		case *map[string]string:
			arg = " KEY=VALUE"
		}
		fmt.Fprintf(&b, "  -%s%s\n      %s. Env: %s; file: %s\n", s.Flag, arg, strings.ToUpper(s.Usage[:1])+s.Usage[1:], s.Env, s.File)
	}
	return b.String()
}
