package main

import (
	"net/http"

	"github.com/hashicorp/go-hclog"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/internal/agentconfig"
)

// apiHandler builds the HTTP API every agent serves on -http-addr:
// package api's handler, with this agent's version, role and
// configuration summary. ready reports extra conditions of this agent
// (the dev agent's sample inventory); /v1/ready checks them after the
// node's own readiness. A variable, so that tests can wrap it.
var apiHandler = func(node *cluster.Node, cfg *agentconfig.Config, x httpExtras, logger hclog.Logger, logs api.LogSource) http.Handler {
	return api.New(node, api.Options{
		Ready:        x.ready,
		LoopbackOnly: x.loopbackOnly,
		SnapshotDir:  x.snapshotDir,
		Auditor:      x.auditor,
		Version:      version,
		Role:         roleOf(cfg),
		Config: map[string]any{
			"dev": cfg.Dev, "config_files": cfg.ConfigFiles, "node_name": cfg.NodeName, "data_dir": cfg.DataDir,
			"bind_addr": cfg.BindAddr, "advertise_addr": cfg.AdvertiseAddr, "http_addr": cfg.HTTPAddr,
			"raft_port": cfg.RaftPort, "rpc_port": cfg.RPCPort, "gossip_port": cfg.GossipPort,
			"server": cfg.Server, "bootstrap_expect": cfg.BootstrapExpect, "join": cfg.Join,
			"host": cfg.Host, "devices_file": cfg.DevicesFile, "discover": cfg.Discover,
			"tick_interval": cfg.TickInterval.String(), "host_down_grace": cfg.HostDownGrace.String(),
			"dead_server_grace": cfg.DeadServerGrace.String(), "no_leader_hold": cfg.NoLeaderHold.String(),
			"log_level": cfg.LogLevel, "enable_debug": cfg.EnableDebug,
			"gossip_encrypt_key_set": cfg.Encrypt != "", "keyring_file": cfg.KeyringFile,
			"tls": cfg.TLSEnabled(), "tls_verify_incoming": cfg.TLSVerifyIncoming,
			"tls_verify_server_hostname": cfg.TLSVerifyServerHostname, "tls_verify_https_client": cfg.TLSVerifyHTTPSClient,
			"acl_enabled": cfg.ACLEnabled, "acl_token_set": cfg.ACLToken != "",
			"http_max_conns_per_client": cfg.HTTPMaxConnsPerClient, "http_max_conns": cfg.HTTPMaxConns,
			"audit": x.auditor != nil,
		},
		EnableDebug: cfg.EnableDebug,
		ACLEnabled:  cfg.ACLEnabled,
		Logger:      logger,
		Logs:        logs,
	})
}
