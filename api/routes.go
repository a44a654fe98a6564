package api

import (
	"net/http"
	"net/http/pprof"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/ui"
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
	// need is what the request's token must grant when ACLs are on.
	need capability
	// bodyNamespace: the request body may name the namespace.
	bodyNamespace bool
	// batch routes may also come as a request of POST /v1/batch.
	batch bool
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

// testRoutes are served only by a binary started with the test knob that
// gives it one more command type (fsm.EnableTestNoop), for mixed-version
// tests; they are not part of the API.
func testRoutes() []route {
	return []route{
		{method: "POST", path: "/v1/operator/test-noop", handle: (*Server).testNoop, need: capWrite(fsm.AreaOperator)},
	}
}

// routes is the route table.
func routes() []route {
	return []route{
		// Allocations.
		{method: "POST", path: "/v1/allocations", handle: (*Server).createAllocation, need: capWrite(fsm.AreaAllocations), bodyNamespace: true, batch: true},
		{method: "GET", path: "/v1/allocations", handle: (*Server).listAllocations, need: capRead(fsm.AreaAllocations)},
		{method: "GET", path: "/v1/allocations/{id}", handle: (*Server).getAllocation, need: capRead(fsm.AreaAllocations)},
		{method: "POST", path: "/v1/allocations/{id}/release", handle: (*Server).releaseAllocation, need: capWrite(fsm.AreaAllocations), batch: true},
		{method: "POST", path: "/v1/allocations/{id}/renew", handle: (*Server).renewAllocation, need: capWrite(fsm.AreaAllocations), batch: true},
		{method: "POST", path: "/v1/allocations/{id}/cancel", handle: (*Server).cancelAllocation, need: capWrite(fsm.AreaAllocations), batch: true},
		{method: "POST", path: "/v1/batch", handle: (*Server).batch, need: capAnyone},
		{method: "GET", path: "/v1/queue", handle: (*Server).getQueue, need: capRead(fsm.AreaAllocations)},
		{method: "GET", path: "/v1/queue/config", handle: (*Server).getQueueConfig, need: capRead(fsm.AreaAllocations)},
		{method: "PUT", path: "/v1/queue/config", handle: (*Server).setQueueConfig, need: capWrite(fsm.AreaOperator)},
		{method: "GET", path: "/v1/history", handle: (*Server).getHistory, need: capRead(fsm.AreaAllocations)},

		// Devices and hosts.
		{method: "GET", path: "/v1/devices", handle: (*Server).listDevices, need: capRead(fsm.AreaDevices)},
		{method: "GET", path: "/v1/devices/{id}", handle: (*Server).getDevice, need: capRead(fsm.AreaDevices)},
		{method: "POST", path: "/v1/devices/{id}/status", handle: (*Server).setDeviceStatus, need: capWrite(fsm.AreaDevices)},
		{method: "POST", path: "/v1/devices/{id}/drain", handle: (*Server).drainDevice, need: capWrite(fsm.AreaDevices)},
		{method: "POST", path: "/v1/devices/{id}/undrain", handle: (*Server).undrainDevice, need: capWrite(fsm.AreaDevices)},
		{method: "GET", path: "/v1/hosts", handle: (*Server).listHosts, need: capRead(fsm.AreaDevices)},
		{method: "GET", path: "/v1/hosts/{id}", handle: (*Server).getHost, need: capRead(fsm.AreaDevices)},
		{method: "PUT", path: "/v1/hosts/{id}", handle: (*Server).registerHost, hostBody: true, need: capability{area: fsm.AreaDevices, write: true, host: true}},
		{method: "DELETE", path: "/v1/hosts/{id}", handle: (*Server).removeHost, need: capWrite(fsm.AreaDevices)},
		{method: "POST", path: "/v1/hosts/{id}/drain", handle: (*Server).drainHost, need: capWrite(fsm.AreaDevices)},
		{method: "POST", path: "/v1/hosts/{id}/undrain", handle: (*Server).undrainHost, need: capWrite(fsm.AreaDevices)},

		// Pools, policies, retention.
		{method: "GET", path: "/v1/pools", handle: (*Server).listPools, need: capRead(fsm.AreaPolicies)},
		{method: "PUT", path: "/v1/pools/{pool}/policy", handle: (*Server).setPoolPolicy, need: capWrite(fsm.AreaPolicies)},
		{method: "DELETE", path: "/v1/pools/{pool}/policy", handle: (*Server).deletePoolPolicy, need: capWrite(fsm.AreaPolicies)},
		{method: "GET", path: "/v1/policies", handle: (*Server).getPolicies, need: capRead(fsm.AreaPolicies)},
		{method: "PUT", path: "/v1/policies/{type}", handle: (*Server).setTypePolicy, need: capWrite(fsm.AreaPolicies)},
		{method: "GET", path: "/v1/quotas", handle: (*Server).listQuotas, need: capRead(fsm.AreaAllocations)},
		{method: "PUT", path: "/v1/quotas/{namespace}", handle: (*Server).setQuota, need: capWrite(fsm.AreaOperator)},
		{method: "DELETE", path: "/v1/quotas/{namespace}", handle: (*Server).deleteQuota, need: capWrite(fsm.AreaOperator)},
		{method: "GET", path: "/v1/retention", handle: (*Server).getRetention, need: capRead(fsm.AreaOperator)},
		{method: "PUT", path: "/v1/retention", handle: (*Server).setRetention, need: capWrite(fsm.AreaOperator)},

		// Events: every topic's events are filtered by what the token
		// may read.
		{method: "GET", path: "/v1/event/stream", handle: (*Server).eventStream, exempt: true, need: capAnyToken},

		// Statistics and advice.
		{method: "GET", path: "/v1/stats", handle: (*Server).getStats, need: capRead(fsm.AreaAllocations)},
		{method: "GET", path: "/v1/stats/namespaces", handle: (*Server).getNamespaceStats, need: capRead(fsm.AreaAllocations)},
		{method: "GET", path: "/v1/recommendations", handle: (*Server).getRecommendations, need: capRead(fsm.AreaAllocations)},

		// Cluster and agent.
		{method: "GET", path: "/v1/cluster/members", handle: (*Server).getMembers, need: capRead(fsm.AreaOperator)},
		{method: "GET", path: "/v1/cluster/leader", handle: (*Server).getLeader, need: capRead(fsm.AreaOperator)},
		{method: "GET", path: "/v1/cluster/raft", handle: (*Server).getRaft, need: capRead(fsm.AreaOperator)},
		{method: "DELETE", path: "/v1/cluster/raft/peers/{id}", handle: (*Server).removePeer, need: capWrite(fsm.AreaOperator)},
		{method: "DELETE", path: "/v1/cluster/raft/removed/{id}", handle: (*Server).readmitPeer, need: capWrite(fsm.AreaOperator)},
		{method: "GET", path: "/v1/agent/self", handle: (*Server).getAgentSelf, need: capRead(fsm.AreaAgent)},
		{method: "GET", path: "/v1/agent/monitor", handle: (*Server).monitor, exempt: true, need: capRead(fsm.AreaAgent)},
		{method: "GET", path: "/v1/snapshot", handle: (*Server).saveSnapshot, need: capWrite(fsm.AreaOperator)},
		{method: "PUT", path: "/v1/snapshot", handle: (*Server).restoreSnapshot, stream: true, need: capWrite(fsm.AreaOperator)},

		// ACLs.
		{method: "POST", path: "/v1/acl/bootstrap", handle: (*Server).aclBootstrap, need: capAnyone},
		{method: "GET", path: "/v1/acl/policies", handle: (*Server).aclPolicyList, need: capRead(fsm.AreaOperator)},
		{method: "GET", path: "/v1/acl/policy/{name}", handle: (*Server).aclPolicyRead, need: capRead(fsm.AreaOperator)},
		{method: "PUT", path: "/v1/acl/policy/{name}", handle: (*Server).aclPolicyApply, need: capWrite(fsm.AreaOperator)},
		{method: "DELETE", path: "/v1/acl/policy/{name}", handle: (*Server).aclPolicyDelete, need: capWrite(fsm.AreaOperator)},
		{method: "POST", path: "/v1/acl/token", handle: (*Server).aclTokenCreate, need: capWrite(fsm.AreaOperator)},
		{method: "GET", path: "/v1/acl/tokens", handle: (*Server).aclTokenList, need: capRead(fsm.AreaOperator)},
		{method: "GET", path: "/v1/acl/token/self", handle: (*Server).aclTokenSelf, need: capAnyToken},
		{method: "GET", path: "/v1/acl/token/{accessor}", handle: (*Server).aclTokenRead, need: capRead(fsm.AreaOperator)},
		{method: "PUT", path: "/v1/acl/token/{accessor}", handle: (*Server).aclTokenUpdate, need: capWrite(fsm.AreaOperator)},
		{method: "DELETE", path: "/v1/acl/token/{accessor}", handle: (*Server).aclTokenDelete, need: capWrite(fsm.AreaOperator)},

		// Gossip keyring.
		{method: "GET", path: "/v1/operator/keyring", handle: (*Server).listKeyring, need: capRead(fsm.AreaOperator)},
		{method: "POST", path: "/v1/operator/keyring", handle: (*Server).installKey, need: capWrite(fsm.AreaOperator)},
		{method: "PUT", path: "/v1/operator/keyring", handle: (*Server).useKey, need: capWrite(fsm.AreaOperator)},
		{method: "DELETE", path: "/v1/operator/keyring", handle: (*Server).removeKey, need: capWrite(fsm.AreaOperator)},

		// The web UI: its files need no token; what they read does.
		{method: "GET", path: ui.Prefix, handle: serveUI, exempt: true, need: capAnyone},
		{method: "GET", path: "/{$}", handle: serveUI, exempt: true, need: capAnyone},

		// Probes and metrics.
		{method: "GET", path: "/v1/health", handle: (*Server).getHealth, exempt: true, need: capAnyone},
		{method: "GET", path: "/v1/ready", handle: (*Server).getReady, exempt: true, need: capAnyone},
		{method: "GET", path: "/metrics", handle: (*Server).getMetrics, exempt: true, need: capRead(fsm.AreaAgent)},

		// Profiling, with Options.EnableDebug.
		{method: "GET", path: "/debug/pprof/", handle: pprofRoute(pprof.Index), debug: true, need: capRead(fsm.AreaAgent)},
		{method: "GET", path: "/debug/pprof/cmdline", handle: pprofRoute(pprof.Cmdline), debug: true, need: capRead(fsm.AreaAgent)},
		{method: "GET", path: "/debug/pprof/profile", handle: pprofRoute(pprof.Profile), debug: true, need: capRead(fsm.AreaAgent)},
		{method: "GET", path: "/debug/pprof/symbol", handle: pprofRoute(pprof.Symbol), debug: true, need: capRead(fsm.AreaAgent)},
		{method: "POST", path: "/debug/pprof/symbol", handle: pprofRoute(pprof.Symbol), debug: true, need: capRead(fsm.AreaAgent)},
		{method: "GET", path: "/debug/pprof/trace", handle: pprofRoute(pprof.Trace), debug: true, need: capRead(fsm.AreaAgent)},
	}
}

// uiFiles serves the web UI's files.
var uiFiles = ui.Handler()

// serveUI serves the web UI under /ui/, and sends / there.
func serveUI(_ *Server, w http.ResponseWriter, r *http.Request) error {
	uiFiles.ServeHTTP(w, r)
	return nil
}
