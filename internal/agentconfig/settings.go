package agentconfig

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/dmsc/dmsc/cluster"
)

// Setting is one configuration value and its three spellings.
type Setting struct {
	// Flag is the flag name without the dash.
	Flag string
	// Env is the environment variable.
	Env string
	// File is the key in the config file; a dot separates block and key.
	File string
	// Usage is the help text.
	Usage string
	// field returns a pointer to the value in a Config.
	field func(c *Config) any
}

// Settings lists every setting in help order.
var Settings = []Setting{
	{"node", "DMSC_NODE_NAME", "node_name", "unique, stable node name (default: the short hostname)", func(c *Config) any { return &c.NodeName }},
	{"data-dir", "DMSC_DATA_DIR", "data_dir", "directory for the Raft log, stable store and snapshots (servers), and the gossip keyring", func(c *Config) any { return &c.DataDir }},
	{"bind", "DMSC_BIND_ADDR", "bind_addr", "IP address the cluster ports bind", func(c *Config) any { return &c.BindAddr }},
	{"advertise", "DMSC_ADVERTISE_ADDR", "advertise_addr", "IP address other nodes use to reach this one (default: bind address, or the first private IP)", func(c *Config) any { return &c.AdvertiseAddr }},
	{"http-addr", "DMSC_HTTP_ADDR", "http_addr", "host:port of the HTTP API", func(c *Config) any { return &c.HTTPAddr }},
	{"raft-port", "DMSC_RAFT_PORT", "ports.raft", "Raft TCP port (0: any free port)", func(c *Config) any { return &c.RaftPort }},
	{"rpc-port", "DMSC_RPC_PORT", "ports.rpc", "node-to-node RPC TCP port (0: any free port)", func(c *Config) any { return &c.RPCPort }},
	{"gossip-port", "DMSC_GOSSIP_PORT", "ports.gossip", "gossip TCP and UDP port (0: any free port)", func(c *Config) any { return &c.GossipPort }},
	{"log-level", "DMSC_LOG_LEVEL", "log_level", "trace, debug, info, warn or error", func(c *Config) any { return &c.LogLevel }},
	{"log-json", "DMSC_LOG_JSON", "log_json", "log in JSON", func(c *Config) any { return &c.LogJSON }},
	{"enable-debug", "DMSC_ENABLE_DEBUG", "enable_debug", "serve /debug/pprof/ on the HTTP API", func(c *Config) any { return &c.EnableDebug }},

	{"join", "DMSC_JOIN", "join", "gossip address (host[:port]) of a server to join; repeat or separate with commas", func(c *Config) any { return &c.Join }},
	{"retry-interval", "DMSC_RETRY_INTERVAL", "retry_interval", "wait between join attempts", func(c *Config) any { return &c.RetryJoinInterval }},
	{"reconnect-interval", "DMSC_RECONNECT_INTERVAL", "reconnect_interval", "how often failed members (and the join addresses, when no server is seen) are contacted again; keep it below the host-down grace", func(c *Config) any { return &c.ReconnectInterval }},

	{"server", "DMSC_SERVER", "server.enabled", "run as a server (a Raft voter holding the state)", func(c *Config) any { return &c.Server }},
	{"bootstrap-expect", "DMSC_BOOTSTRAP_EXPECT", "server.bootstrap_expect", "servers to wait for before the first election of a new cluster", func(c *Config) any { return &c.BootstrapExpect }},
	{"heartbeat-timeout", "DMSC_HEARTBEAT_TIMEOUT", "server.heartbeat_timeout", "Raft heartbeat timeout", func(c *Config) any { return &c.HeartbeatTimeout }},
	{"election-timeout", "DMSC_ELECTION_TIMEOUT", "server.election_timeout", "Raft election timeout", func(c *Config) any { return &c.ElectionTimeout }},
	{"leader-lease-timeout", "DMSC_LEADER_LEASE_TIMEOUT", "server.leader_lease_timeout", "Raft leader lease timeout", func(c *Config) any { return &c.LeaderLeaseTimeout }},
	{"commit-timeout", "DMSC_COMMIT_TIMEOUT", "server.commit_timeout", "Raft commit timeout", func(c *Config) any { return &c.CommitTimeout }},
	{"snapshot-threshold", "DMSC_SNAPSHOT_THRESHOLD", "server.snapshot_threshold", "log entries between snapshots", func(c *Config) any { return &c.SnapshotThreshold }},
	{"snapshot-interval", "DMSC_SNAPSHOT_INTERVAL", "server.snapshot_interval", "how often the snapshot threshold is checked", func(c *Config) any { return &c.SnapshotInterval }},
	{"trailing-logs", "DMSC_TRAILING_LOGS", "server.trailing_logs", "log entries kept after a snapshot", func(c *Config) any { return &c.TrailingLogs }},
	{"state-hash-interval", "DMSC_STATE_HASH_INTERVAL", "server.state_hash_interval", "applied entries between the state hashes the servers compare", func(c *Config) any { return &c.StateHashInterval }},
	{"snapshot-retain", "DMSC_SNAPSHOT_RETAIN", "server.snapshot_retain", "snapshots kept on disk", func(c *Config) any { return &c.SnapshotRetain }},
	{"tick-interval", "DMSC_TICK_INTERVAL", "server.tick_interval", "how often the leader advances time when no deadline is due sooner", func(c *Config) any { return &c.TickInterval }},
	{"reconcile-interval", "DMSC_RECONCILE_INTERVAL", "server.reconcile_interval", "how often the leader reconciles gossip with the Raft configuration and hosts", func(c *Config) any { return &c.ReconcileInterval }},
	{"dead-server-grace", "DMSC_DEAD_SERVER_GRACE", "server.dead_server_grace", "how long a failed server stays in the Raft configuration", func(c *Config) any { return &c.DeadServerGrace }},
	{"server-stabilization-time", "DMSC_SERVER_STABILIZATION_TIME", "server.stabilization_time", "how long a new server must stay healthy as a non-voter before it is made a voter", func(c *Config) any { return &c.StabilizationTime }},
	{"host-down-grace", "DMSC_HOST_DOWN_GRACE", "server.host_down_grace", "how long a host may be gone before it is marked down", func(c *Config) any { return &c.HostDownGrace }},
	{"no-leader-hold", "DMSC_NO_LEADER_HOLD", "server.no_leader_hold", "how long a write waits for a leader before a retryable error", func(c *Config) any { return &c.NoLeaderHold }},
	{"request-timeout", "DMSC_REQUEST_TIMEOUT", "server.request_timeout", "how long a server waits on a leader that does not answer (a forwarded write, a read index) before a retryable 504; default 2x the election timeout", func(c *Config) any { return &c.RequestTimeout }},

	{"gossip-probe-interval", "DMSC_GOSSIP_PROBE_INTERVAL", "gossip.probe_interval", "gossip failure-detection probe interval", func(c *Config) any { return &c.GossipProbeInterval }},
	{"gossip-suspicion-mult", "DMSC_GOSSIP_SUSPICION_MULT", "gossip.suspicion_mult", "gossip suspicion multiplier", func(c *Config) any { return &c.GossipSuspicionMult }},
	{"encrypt", "DMSC_ENCRYPT", "encrypt", "gossip encryption key, base64 of 32 bytes ('dmsc operator keygen' makes one); every member needs it. A keyring file from an earlier run wins over it", func(c *Config) any { return &c.Encrypt }},
	{"keyring-file", "DMSC_KEYRING_FILE", "keyring_file", "file the gossip keyring persists in, so rotated keys survive restarts (default: <data-dir>/keyring; a host without -data-dir needs it)", func(c *Config) any { return &c.KeyringFile }},

	{"host", "DMSC_HOST", "host.enabled", "report this machine's devices to the cluster", func(c *Config) any { return &c.Host }},
	{"devices", "DMSC_DEVICES", "host.devices_file", "devices.json inventory file", func(c *Config) any { return &c.DevicesFile }},
	{"discover", "DMSC_DISCOVER", "host.discover", "discover devices: any of nvidia, cpu, memory (comma-separated)", func(c *Config) any { return &c.Discover }},
	{"nvidia-smi", "DMSC_NVIDIA_SMI", "host.nvidia_smi", "nvidia-smi binary used by -discover nvidia", func(c *Config) any { return &c.NVIDIASMI }},
	{"reserve-memory-gb", "DMSC_RESERVE_MEMORY_GB", "host.reserve_memory_gb", "GiB of discovered memory kept back for the system", func(c *Config) any { return &c.ReserveMemoryGB }},
	{"label", "DMSC_HOST_LABELS", "host.labels", "host label key=value added to every device; repeat or separate with commas", func(c *Config) any { return &c.HostLabels }},
	{"inventory-interval", "DMSC_INVENTORY_INTERVAL", "host.inventory_interval", "how often the inventory is re-read", func(c *Config) any { return &c.InventoryInterval }},

	{"tls-ca-file", "DMSC_TLS_CA_FILE", "tls.ca_file", "PEM file of the cluster's CA (dmsc-agent-ca.pem); with the certificate and key, turns TLS on for Raft, the node RPC and HTTPS on the API", func(c *Config) any { return &c.TLSCAFile }},
	{"tls-cert-file", "DMSC_TLS_CERT_FILE", "tls.cert_file", "PEM file of this node's certificate (dmsc tls cert create): a server's or a host's, for this node's name", func(c *Config) any { return &c.TLSCertFile }},
	{"tls-key-file", "DMSC_TLS_KEY_FILE", "tls.key_file", "PEM file of this node's certificate's key", func(c *Config) any { return &c.TLSKeyFile }},
	{"tls-verify-incoming", "DMSC_TLS_VERIFY_INCOMING", "tls.verify_incoming", "Raft and the node RPC require a certificate of the CA from every caller and authorize calls by its role (default true; false only while rolling TLS out)", func(c *Config) any { return &c.TLSVerifyIncoming }},
	{"tls-verify-server-hostname", "DMSC_TLS_VERIFY_SERVER_HOSTNAME", "tls.verify_server_hostname", "servers this node dials must present a server's certificate, with the server's name where known (default true)", func(c *Config) any { return &c.TLSVerifyServerHostname }},
	{"acl-enabled", "DMSC_ACL_ENABLED", "acl.enabled", "check ACL tokens on every HTTP API request and on host registration (bootstrap with dmsc acl bootstrap)", func(c *Config) any { return &c.ACLEnabled }},
	{"acl-token", "DMSC_ACL_TOKEN", "acl.token", "this agent's own ACL token: a host registers its devices with it when ACLs are on", func(c *Config) any { return &c.ACLToken }},
	{"acl-token-file", "DMSC_ACL_TOKEN_FILE", "acl.token_file", "file holding this agent's own ACL token (read at start; surrounding white space dropped): keeps the secret out of config files, the environment and the command line", func(c *Config) any { return &c.ACLTokenFile }},
	{"tls-verify-https-client", "DMSC_TLS_VERIFY_HTTPS_CLIENT", "tls.verify_https_client", "the HTTPS API requires a client certificate of the CA (default false)", func(c *Config) any { return &c.TLSVerifyHTTPSClient }},

	{"http-max-conns-per-client", "DMSC_HTTP_MAX_CONNS_PER_CLIENT", "limits.http_max_conns_per_client", "HTTP API connections one client IP address may hold open; more are answered 429 and closed (0: unlimited)", func(c *Config) any { return &c.HTTPMaxConnsPerClient }},
	{"http-max-conns", "DMSC_HTTP_MAX_CONNS", "limits.http_max_conns", "HTTP API connections open at once from all clients; more are answered 429 and closed (0: unlimited)", func(c *Config) any { return &c.HTTPMaxConns }},
	{"audit-enabled", "DMSC_AUDIT_ENABLED", "audit.enabled", "append every write request to the audit log, one JSON line each", func(c *Config) any { return &c.AuditEnabled }},
	{"audit-path", "DMSC_AUDIT_PATH", "audit.path", "file of the audit log (default: DATA_DIR/audit/audit.log)", func(c *Config) any { return &c.AuditPath }},
	{"audit-max-bytes", "DMSC_AUDIT_MAX_BYTES", "audit.max_bytes", "size at which the audit log is rotated to PATH.1, PATH.2, ...", func(c *Config) any { return &c.AuditMaxBytes }},
	{"audit-max-files", "DMSC_AUDIT_MAX_FILES", "audit.max_files", "rotated audit log files kept (0: none)", func(c *Config) any { return &c.AuditMaxFiles }},
}

// isBool reports whether the setting is a switch.
func (s Setting) isBool() bool {
	_, ok := s.field(&Config{}).(*bool)
	return ok
}

// set parses vals into the setting's field of c. A list setting takes
// every value (each may hold several, separated by commas) and replaces
// the list; a single-valued setting takes the last.
func (s Setting) set(c *Config, vals []string) error {
	if len(vals) == 0 {
		return nil
	}
	last := strings.TrimSpace(vals[len(vals)-1])
	switch p := s.field(c).(type) {
	case *string:
		*p = last
	case *bool:
		v, err := strconv.ParseBool(last)
		if err != nil {
			return fmt.Errorf("%q is not true or false", last)
		}
		*p = v
	case *int:
		v, err := strconv.Atoi(last)
		if err != nil {
			return fmt.Errorf("%q is not a whole number", last)
		}
		*p = v
	case *uint64:
		v, err := strconv.ParseUint(last, 10, 64)
		if err != nil {
			return fmt.Errorf("%q is not a whole number ≥ 0", last)
		}
		*p = v
	case *float64:
		v, err := strconv.ParseFloat(last, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%q is not a number", last)
		}
		*p = v
	case *time.Duration:
		v, err := time.ParseDuration(last)
		if err != nil || v < 0 {
			return fmt.Errorf("%q is not a duration ≥ 0 such as 500ms, 30s or 10m", last)
		}
		*p = v
	case *[]string:
		var list []string
		for _, v := range splitList(vals) {
			if s.Flag == "join" {
				v = withDefaultPort(v, cluster.DefaultGossipPort)
			}
			list = append(list, v)
		}
		*p = list
	case *map[string]string:
		m := map[string]string{}
		for _, kv := range splitList(vals) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok || strings.TrimSpace(k) == "" {
				return fmt.Errorf("%q is not key=value", kv)
			}
			m[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
		*p = m
	default:
		return fmt.Errorf("setting %s has an unsupported type %T", s.Flag, p)
	}
	return nil
}

// splitList splits every value at commas and drops empty items.
func splitList(vals []string) []string {
	var out []string
	for _, v := range vals {
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				out = append(out, item)
			}
		}
	}
	return out
}

// withDefaultPort adds port to an address without one ("10.0.0.1",
// "[::1]", "server-1").
func withDefaultPort(addr string, port int) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	host := strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]")
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// settingByFile finds a setting by its file key.
func settingByFile(key string) (Setting, bool) {
	for _, s := range Settings {
		if s.File == key {
			return s, true
		}
	}
	return Setting{}, false
}
