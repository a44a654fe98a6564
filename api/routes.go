package api

import (
	"net/http"
	"net/http/pprof"
)

// handlerFunc serves one route; an error it returns is answered as JSON.
type handlerFunc func(s *Server, w http.ResponseWriter, r *http.Request) error

// route is one entry of the route table, which both registers the routes
// and is checked against docs/api.md by a test.
type route struct {
	method string
	path   string
	handle handlerFunc
	// body is the request body cap; 0 takes Options.MaxBodyBytes.
	body int64
	// hostBody takes Options.MaxHostBytes as the cap.
	hostBody bool
	// exempt routes (probes, metrics) bypass the concurrency limit.
	exempt bool
	// debug routes are served only with Options.EnableDebug.
	debug bool
	// stream routes take an application/octet-stream body of their own
	// size cap, read within Options.SnapshotBodyTimeout.
	stream bool
}

func (rt route) pattern() string { return rt.method + " " + rt.path }

func (rt route) bodyLimit(o *Options) int64 {
	switch {
	case rt.stream:
		return o.MaxSnapshotBytes
	case rt.body > 0:
		return rt.body
	case rt.hostBody:
		return o.MaxHostBytes
	}
	return o.MaxBodyBytes
}

// routes is the route table.
func routes() []route {
	return []route{
		// Allocations.
		{method: "POST", path: "/v1/allocations", handle: (*Server).createAllocation},
		{method: "GET", path: "/v1/allocations", handle: (*Server).listAllocations},
		{method: "GET", path: "/v1/allocations/{id}", handle: (*Server).getAllocation},
		{method: "POST", path: "/v1/allocations/{id}/release", handle: (*Server).releaseAllocation},
		{method: "POST", path: "/v1/allocations/{id}/renew", handle: (*Server).renewAllocation},
		{method: "POST", path: "/v1/allocations/{id}/cancel", handle: (*Server).cancelAllocation},
		{method: "GET", path: "/v1/queue", handle: (*Server).getQueue},
		{method: "GET", path: "/v1/history", handle: (*Server).getHistory},

		// Devices and hosts.
		{method: "GET", path: "/v1/devices", handle: (*Server).listDevices},
		{method: "GET", path: "/v1/devices/{id}", handle: (*Server).getDevice},
		{method: "POST", path: "/v1/devices/{id}/status", handle: (*Server).setDeviceStatus},
		{method: "POST", path: "/v1/devices/{id}/drain", handle: (*Server).drainDevice},
		{method: "POST", path: "/v1/devices/{id}/undrain", handle: (*Server).undrainDevice},
		{method: "GET", path: "/v1/hosts", handle: (*Server).listHosts},
		{method: "GET", path: "/v1/hosts/{id}", handle: (*Server).getHost},
		{method: "PUT", path: "/v1/hosts/{id}", handle: (*Server).registerHost, hostBody: true},
		{method: "DELETE", path: "/v1/hosts/{id}", handle: (*Server).removeHost},

		// Pools, policies, retention.
		{method: "GET", path: "/v1/pools", handle: (*Server).listPools},
		{method: "PUT", path: "/v1/pools/{pool}/policy", handle: (*Server).setPoolPolicy},
		{method: "DELETE", path: "/v1/pools/{pool}/policy", handle: (*Server).deletePoolPolicy},
		{method: "GET", path: "/v1/policies", handle: (*Server).getPolicies},
		{method: "PUT", path: "/v1/policies/{type}", handle: (*Server).setTypePolicy},
		{method: "GET", path: "/v1/retention", handle: (*Server).getRetention},
		{method: "PUT", path: "/v1/retention", handle: (*Server).setRetention},

		// Statistics and advice.
		{method: "GET", path: "/v1/stats", handle: (*Server).getStats},
		{method: "GET", path: "/v1/recommendations", handle: (*Server).getRecommendations},

		// Cluster and agent.
		{method: "GET", path: "/v1/cluster/members", handle: (*Server).getMembers},
		{method: "GET", path: "/v1/cluster/leader", handle: (*Server).getLeader},
		{method: "GET", path: "/v1/cluster/raft", handle: (*Server).getRaft},
		{method: "DELETE", path: "/v1/cluster/raft/peers/{id}", handle: (*Server).removePeer},
		{method: "DELETE", path: "/v1/cluster/raft/removed/{id}", handle: (*Server).readmitPeer},
		{method: "GET", path: "/v1/agent/self", handle: (*Server).getAgentSelf},
		{method: "GET", path: "/v1/snapshot", handle: (*Server).saveSnapshot},
		{method: "PUT", path: "/v1/snapshot", handle: (*Server).restoreSnapshot, stream: true},

		// Gossip keyring.
		{method: "GET", path: "/v1/operator/keyring", handle: (*Server).listKeyring},
		{method: "POST", path: "/v1/operator/keyring", handle: (*Server).installKey},
		{method: "PUT", path: "/v1/operator/keyring", handle: (*Server).useKey},
		{method: "DELETE", path: "/v1/operator/keyring", handle: (*Server).removeKey},

		// Probes and metrics.
		{method: "GET", path: "/v1/health", handle: (*Server).getHealth, exempt: true},
		{method: "GET", path: "/v1/ready", handle: (*Server).getReady, exempt: true},
		{method: "GET", path: "/metrics", handle: (*Server).getMetrics, exempt: true},

		// Profiling, with Options.EnableDebug.
		{method: "GET", path: "/debug/pprof/", handle: pprofRoute(pprof.Index), debug: true},
		{method: "GET", path: "/debug/pprof/cmdline", handle: pprofRoute(pprof.Cmdline), debug: true},
		{method: "GET", path: "/debug/pprof/profile", handle: pprofRoute(pprof.Profile), debug: true},
		{method: "GET", path: "/debug/pprof/symbol", handle: pprofRoute(pprof.Symbol), debug: true},
		{method: "POST", path: "/debug/pprof/symbol", handle: pprofRoute(pprof.Symbol), debug: true},
		{method: "GET", path: "/debug/pprof/trace", handle: pprofRoute(pprof.Trace), debug: true},
	}
}
