package main

import (
	"encoding/json"
	"net/http"

	"github.com/hashicorp/go-hclog"

	"github.com/dmsc/dmsc/api"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/internal/agentconfig"
)

// apiHandler builds the HTTP API every agent serves on -http-addr. It is
// the hook for the full API: replace it with the transport package's
// handler (allocations, devices, stats, blocking queries, /metrics, ...),
// which must keep serving /v1/health and /v1/ready. ready reports extra
// conditions of this agent (the dev agent's sample inventory); it is
// checked after the node's own readiness.
var apiHandler = func(node *cluster.Node, cfg *agentconfig.Config, ready func() bool, logger hclog.Logger) http.Handler {
	return api.New(node, api.Options{
		Version: version,
		Role:    roleOf(cfg),
		Config: map[string]any{
			"dev": cfg.Dev, "config_files": cfg.ConfigFiles, "node_name": cfg.NodeName, "data_dir": cfg.DataDir,
			"bind_addr": cfg.BindAddr, "advertise_addr": cfg.AdvertiseAddr, "http_addr": cfg.HTTPAddr,
			"raft_port": cfg.RaftPort, "rpc_port": cfg.RPCPort, "gossip_port": cfg.GossipPort,
			"server": cfg.Server, "bootstrap_expect": cfg.BootstrapExpect, "join": cfg.Join,
			"host": cfg.Host, "devices_file": cfg.DevicesFile, "discover": cfg.Discover,
			"tick_interval": cfg.TickInterval.String(), "host_down_grace": cfg.HostDownGrace.String(),
			"dead_server_grace": cfg.DeadServerGrace.String(), "no_leader_hold": cfg.NoLeaderHold.String(),
			"log_level": cfg.LogLevel, "enable_debug": cfg.EnableDebug,
		},
		Ready:       ready,
		EnableDebug: cfg.EnableDebug,
		Logger:      logger,
	})
}

// healthHandler serves the two probes:
//
//	GET /v1/health  200 while the process serves HTTP.
//	GET /v1/ready   200 when the node knows a leader and has caught up (a
//	                host: has joined the pool), 503 otherwise; the body is
//	                the node's status either way.
func healthHandler(node *cluster.Node, ready func() bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "node": node.Self().ID})
	})
	mux.HandleFunc("GET /v1/ready", func(w http.ResponseWriter, r *http.Request) {
		st := node.Status()
		code := http.StatusOK
		if !st.Ready || (ready != nil && !ready()) {
			code = http.StatusServiceUnavailable
			st.Ready = false
		}
		writeJSON(w, code, st)
	})
	return mux
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
