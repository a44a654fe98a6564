// Package agentconfig builds the configuration of `dmsc agent` from a
// config file (HCL, or the JSON form of HCL), DMSC_* environment variables
// and command-line flags, in that order of precedence (a flag beats the
// environment, which beats the file), validates it, and turns it into a
// cluster.Config.
//
// Every setting has the three spellings, listed by Settings: a flag
// (-bootstrap-expect), an environment variable (DMSC_BOOTSTRAP_EXPECT) and
// a file key (server { bootstrap_expect = 3 }). deploy/server.hcl and
// deploy/host.hcl are complete examples.
package agentconfig

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/dmsc/dmsc/cluster"
)

// ErrInvalid is returned (wrapped) for a configuration that cannot be used.
var ErrInvalid = errors.New("invalid agent configuration")

// Default addresses and levels.
const (
	DefaultHTTPAddr = "127.0.0.1:4646"
	DefaultBindAddr = "0.0.0.0"
	DefaultLogLevel = "info"
)

// Discovery sources a host may use, in the order their devices are listed.
const (
	DiscoverNVIDIA = "nvidia"
	DiscoverCPU    = "cpu"
	DiscoverMemory = "memory"
)

var discoverSources = []string{DiscoverNVIDIA, DiscoverCPU, DiscoverMemory}

// Config is the agent's configuration.
type Config struct {
	// Dev runs a one-node cluster with the sample inventory.
	Dev bool
	// ConfigFiles were read, in order.
	ConfigFiles []string

	NodeName      string
	DataDir       string
	BindAddr      string
	AdvertiseAddr string
	HTTPAddr      string
	RaftPort      int
	RPCPort       int
	GossipPort    int
	LogLevel      string
	LogJSON       bool
	// EnableDebug serves /debug/pprof/ on the HTTP API.
	EnableDebug bool

	Join              []string
	RetryJoinInterval time.Duration
	// ReconnectInterval is how often the node tries to rejoin failed
	// members (and its join addresses when it sees no server); a host-down
	// grace shorter than it may mark running hosts down after every server
	// restarted.
	ReconnectInterval time.Duration

	Server          bool
	BootstrapExpect int

	HeartbeatTimeout   time.Duration
	ElectionTimeout    time.Duration
	LeaderLeaseTimeout time.Duration
	CommitTimeout      time.Duration
	SnapshotThreshold  uint64
	SnapshotInterval   time.Duration
	TrailingLogs       uint64
	StateHashInterval  uint64
	SnapshotRetain     int
	TickInterval       time.Duration
	ReconcileInterval  time.Duration
	DeadServerGrace    time.Duration
	StabilizationTime  time.Duration
	HostDownGrace      time.Duration
	NoLeaderHold       time.Duration
	RequestTimeout     time.Duration

	GossipProbeInterval time.Duration
	GossipSuspicionMult int
	// Encrypt is the gossip encryption key in base64; KeyringFile is where
	// the gossip keyring persists (default DataDir/keyring).
	Encrypt     string
	KeyringFile string

	// Host makes the agent report devices. A server may also be a host.
	Host bool
	// DevicesFile is a devices.json inventory.
	DevicesFile string
	// Discover lists discovery sources: nvidia, cpu, memory.
	Discover []string
	// NVIDIASMI is the nvidia-smi binary discovery runs.
	NVIDIASMI string
	// ReserveMemoryGB is kept back from discovered memory.
	ReserveMemoryGB float64
	// HostLabels are added to every device of the host.
	HostLabels        map[string]string
	InventoryInterval time.Duration

	// TLS (tls.go): the CA, this node's certificate and key; all three
	// or none.
	TLSCAFile   string
	TLSCertFile string
	TLSKeyFile  string
	// TLSVerifyIncoming requires and authorizes certificates on Raft and
	// the node RPC; TLSVerifyServerHostname requires a server's
	// certificate from the servers this node dials; TLSVerifyHTTPSClient
	// requires a client certificate on the HTTPS API.
	TLSVerifyIncoming       bool
	TLSVerifyServerHostname bool
	TLSVerifyHTTPSClient    bool

	// ACLEnabled checks ACL tokens on the HTTP API and on host
	// registration; ACLToken is this agent's own token's secret (a host
	// sends it with its inventory); ACLTokenFile, when set, is the file
	// Load reads ACLToken from.
	ACLEnabled   bool
	ACLToken     string
	ACLTokenFile string
	// Limits and the audit log (limits.go).
	HTTPMaxConnsPerClient int
	HTTPMaxConns          int
	AuditEnabled          bool
	AuditPath             string
	AuditMaxBytes         int
	AuditMaxFiles         int
}

// Default is the configuration before any file, environment or flag.
func Default() Config {
	name, _ := os.Hostname()
	if i := strings.IndexByte(name, '.'); i > 0 {
		name = name[:i]
	}
	return Config{
		NodeName:   name,
		BindAddr:   DefaultBindAddr,
		HTTPAddr:   DefaultHTTPAddr,
		RaftPort:   cluster.DefaultRaftPort,
		RPCPort:    cluster.DefaultRPCPort,
		GossipPort: cluster.DefaultGossipPort,
		LogLevel:   DefaultLogLevel,

		TLSVerifyIncoming:       true,
		TLSVerifyServerHostname: true,

		HTTPMaxConnsPerClient: DefaultHTTPMaxConnsPerClient,
		AuditMaxBytes:         DefaultAuditMaxBytes,
		AuditMaxFiles:         DefaultAuditMaxFiles,
	}
}

// applyDev sets what -dev implies; file, environment and flags still win.
func (c *Config) applyDev() {
	c.Dev = true
	c.Server = true
	c.BootstrapExpect = 1
	c.NodeName = "dev"
	c.BindAddr = "127.0.0.1"
	c.RaftPort, c.RPCPort, c.GossipPort = 0, 0, 0
	c.LogLevel = "info"
}

// Validate reports the first problem with the configuration, saying which
// setting to change.
func (c *Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
	}
	if !c.Dev && !c.Server && !c.Host {
		return bad("choose a role: -server, -host (or both), or -dev for a one-node cluster")
	}
	switch {
	case c.NodeName == "":
		return bad("node name is empty (set -node or DMSC_NODE_NAME)")
	case len(c.NodeName) > 128 || strings.ContainsAny(c.NodeName, " \t\r\n/?#%"):
		return bad("node name %q is longer than 128 bytes or contains spaces or any of / ? # %%", c.NodeName)
	}
	if c.Server && !c.Dev && c.DataDir == "" {
		return bad("a server needs -data-dir (where the Raft log and snapshots live)")
	}
	if c.BootstrapExpect < 0 || c.BootstrapExpect > 7 {
		return bad("bootstrap-expect is %d; want 1, 3 or 5 (at most 7)", c.BootstrapExpect)
	}
	if !c.Server && c.BootstrapExpect != 0 {
		return bad("bootstrap-expect is for servers; add -server or drop it")
	}
	if c.Server && !c.Dev && c.BootstrapExpect == 0 && len(c.Join) == 0 {
		return bad("a server needs -bootstrap-expect N to form a new cluster, or -join to enter one")
	}
	if !c.Server && len(c.Join) == 0 {
		return bad("a host needs -join with the address of at least one server")
	}
	if c.Host && c.DevicesFile == "" && len(c.Discover) == 0 {
		return bad("a host needs -devices FILE or -discover %s (or both)", strings.Join(discoverSources, ","))
	}
	for _, d := range c.Discover {
		if !contains(discoverSources, d) {
			return bad("discover source %q is unknown; want any of %s", d, strings.Join(discoverSources, ", "))
		}
	}
	if c.ReserveMemoryGB < 0 {
		return bad("reserve-memory-gb is %g; want ≥ 0", c.ReserveMemoryGB)
	}
	if ip := net.ParseIP(c.BindAddr); ip == nil {
		return bad("bind address %q is not an IP address", c.BindAddr)
	}
	if c.AdvertiseAddr != "" {
		if ip := net.ParseIP(c.AdvertiseAddr); ip == nil || ip.IsUnspecified() {
			return bad("advertise address %q is not a usable IP address", c.AdvertiseAddr)
		}
	}
	if c.HTTPAddr != "" {
		if _, port, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			return bad("http-addr %q: %v (want host:port, e.g. %s)", c.HTTPAddr, err, DefaultHTTPAddr)
		} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			return bad("http-addr %q: port %q is not a number in 0..65535", c.HTTPAddr, port)
		}
	}
	ports := map[int]string{}
	for _, p := range []struct {
		name string
		v    int
	}{{"raft-port", c.RaftPort}, {"rpc-port", c.RPCPort}, {"gossip-port", c.GossipPort}} {
		if p.v < 0 || p.v > 65535 {
			return bad("%s is %d; want 0..65535 (0 picks a free port)", p.name, p.v)
		}
		if other, dup := ports[p.v]; dup && p.v != 0 {
			return bad("%s and %s are both %d", other, p.name, p.v)
		}
		ports[p.v] = p.name
	}
	for _, j := range c.Join {
		if _, _, err := net.SplitHostPort(j); err != nil {
			return bad("join address %q: %v", j, err)
		}
	}
	if c.Encrypt != "" {
		if _, err := cluster.DecodeGossipKey(c.Encrypt); err != nil {
			return bad("encrypt: %v", err)
		}
	}
	if _, err := hclogLevel(c.LogLevel); err != nil {
		return bad("%v", err)
	}
	if c.LeaderLeaseTimeout > 0 && c.HeartbeatTimeout > 0 && c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		return bad("leader-lease-timeout %s exceeds heartbeat-timeout %s", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	if err := c.validateLimits(); err != nil {
		return err
	}
	return c.validateTLS()
}

// hclogLevel parses a log level name.
func hclogLevel(s string) (hclog.Level, error) {
	l := hclog.LevelFromString(s)
	if l == hclog.NoLevel {
		return l, fmt.Errorf("log level %q is unknown; want trace, debug, info, warn or error", s)
	}
	return l, nil
}

// Logger is the agent's root logger: level and format from the
// configuration, written to w. More sinks may be added to it (dmsc
// monitor streams the agent's log through one).
func (c *Config) Logger(w io.Writer) hclog.InterceptLogger {
	level, err := hclogLevel(c.LogLevel)
	if err != nil {
		level = hclog.Info
	}
	return hclog.NewInterceptLogger(&hclog.LoggerOptions{
		Name:            "dmsc",
		Level:           level,
		Output:          w,
		JSONFormat:      c.LogJSON,
		IncludeLocation: level <= hclog.Debug,
	})
}

// ClusterConfig is the cluster.Config of this agent. inventory reports the
// host's devices (nil for a server without devices); dataDir replaces
// DataDir (the dev agent passes its temporary directory).
func (c *Config) ClusterConfig(dataDir string, inventory cluster.InventoryFunc, version string, logger hclog.Logger) cluster.Config {
	return cluster.Config{
		NodeID:              c.NodeName,
		DataDir:             dataDir,
		BindAddr:            c.BindAddr,
		AdvertiseAddr:       c.AdvertiseAddr,
		RaftPort:            c.RaftPort,
		RPCPort:             c.RPCPort,
		GossipPort:          c.GossipPort,
		HTTPAddr:            c.HTTPAddr,
		Server:              c.Server,
		BootstrapExpect:     c.BootstrapExpect,
		Join:                append([]string(nil), c.Join...),
		RetryJoinInterval:   c.RetryJoinInterval,
		ReconnectInterval:   c.ReconnectInterval,
		HeartbeatTimeout:    c.HeartbeatTimeout,
		ElectionTimeout:     c.ElectionTimeout,
		LeaderLeaseTimeout:  c.LeaderLeaseTimeout,
		CommitTimeout:       c.CommitTimeout,
		SnapshotThreshold:   c.SnapshotThreshold,
		SnapshotInterval:    c.SnapshotInterval,
		TrailingLogs:        c.TrailingLogs,
		StateHashInterval:   c.StateHashInterval,
		SnapshotRetain:      c.SnapshotRetain,
		TickInterval:        c.TickInterval,
		ReconcileInterval:   c.ReconcileInterval,
		DeadServerGrace:     c.DeadServerGrace,
		ServerStabilization: c.StabilizationTime,
		HostDownGrace:       c.HostDownGrace,
		NoLeaderHold:        c.NoLeaderHold,
		RequestTimeout:      c.RequestTimeout,
		GossipProbeInterval: c.GossipProbeInterval,
		GossipSuspicionMult: c.GossipSuspicionMult,
		EncryptKey:          c.encryptKey(),
		KeyringFile:         c.KeyringFile,
		Inventory:           inventory,
		InventoryInterval:   c.InventoryInterval,
		ACLEnabled:          c.ACLEnabled,
		ACLToken:            c.ACLToken,
		Version:             version,
		Logger:              logger,
		// The store itself is loaded by LoadTLS.
		TLSSkipVerifyIncoming:       !c.TLSVerifyIncoming,
		TLSSkipVerifyServerHostname: !c.TLSVerifyServerHostname,
	}
}

// encryptKey is the decoded gossip key, nil without one (Validate has
// checked it).
func (c *Config) encryptKey() []byte {
	if c.Encrypt == "" {
		return nil
	}
	key, _ := cluster.DecodeGossipKey(c.Encrypt)
	return key
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
