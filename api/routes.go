package api

import (
	"net/http"
	"net/http/pprof"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/transport"
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
	// cap is what the request's token must grant when ACLs are on.
	cap capability
	// bodyNamespace: the request body may name the namespace.
	bodyNamespace bool
}

func (rt route) pattern() string { return rt.method + " " + rt.path }

func (rt route) bodyLimit(o *Options) int64 {
	switch {
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
		{method: "POST", path: "/v1/allocations", handle: (*Server).createAllocation, cap: capWrite(fsm.AreaAllocations), bodyNamespace: true},
		{method: "GET", path: "/v1/allocations", handle: (*Server).listAllocations, cap: capRead(fsm.AreaAllocations)},
		{method: "GET", path: "/v1/allocations/{id}", handle: (*Server).getAllocation, cap: capRead(fsm.AreaAllocations)},
		{method: "POST", path: "/v1/allocations/{id}/release", handle: (*Server).releaseAllocation, cap: capWrite(fsm.AreaAllocations)},
		{method: "POST", path: "/v1/allocations/{id}/renew", handle: (*Server).renewAllocation, cap: capWrite(fsm.AreaAllocations)},
		{method: "POST", path: "/v1/allocations/{id}/cancel", handle: (*Server).cancelAllocation, cap: capWrite(fsm.AreaAllocations)},
		{method: "GET", path: "/v1/queue", handle: (*Server).getQueue, cap: capRead(fsm.AreaAllocations)},
		{method: "GET", path: "/v1/history", handle: (*Server).getHistory, cap: capRead(fsm.AreaAllocations)},

		// Devices and hosts.
		{method: "GET", path: "/v1/devices", handle: (*Server).listDevices, cap: capRead(fsm.AreaDevices)},
		{method: "GET", path: "/v1/devices/{id}", handle: (*Server).getDevice, cap: capRead(fsm.AreaDevices)},
		{method: "POST", path: "/v1/devices/{id}/status", handle: (*Server).setDeviceStatus, cap: capWrite(fsm.AreaDevices)},
		{method: "POST", path: "/v1/devices/{id}/drain", handle: (*Server).drainDevice, cap: capWrite(fsm.AreaDevices)},
		{method: "POST", path: "/v1/devices/{id}/undrain", handle: (*Server).undrainDevice, cap: capWrite(fsm.AreaDevices)},
		{method: "GET", path: "/v1/hosts", handle: (*Server).listHosts, cap: capRead(fsm.AreaDevices)},
		{method: "GET", path: "/v1/hosts/{id}", handle: (*Server).getHost, cap: capRead(fsm.AreaDevices)},
		{method: "PUT", path: "/v1/hosts/{id}", handle: (*Server).registerHost, hostBody: true, cap: capability{area: fsm.AreaDevices, write: true, host: true}},
		{method: "DELETE", path: "/v1/hosts/{id}", handle: (*Server).removeHost, cap: capWrite(fsm.AreaDevices)},

		// Pools, policies, retention.
		{method: "GET", path: "/v1/pools", handle: (*Server).listPools, cap: capRead(fsm.AreaPolicies)},
		{method: "PUT", path: "/v1/pools/{pool}/policy", handle: (*Server).setPoolPolicy, cap: capWrite(fsm.AreaPolicies)},
		{method: "DELETE", path: "/v1/pools/{pool}/policy", handle: (*Server).deletePoolPolicy, cap: capWrite(fsm.AreaPolicies)},
		{method: "GET", path: "/v1/policies", handle: (*Server).getPolicies, cap: capRead(fsm.AreaPolicies)},
		{method: "PUT", path: "/v1/policies/{type}", handle: (*Server).setTypePolicy, cap: capWrite(fsm.AreaPolicies)},
		{method: "GET", path: "/v1/retention", handle: (*Server).getRetention, cap: capRead(fsm.AreaOperator)},
		{method: "PUT", path: "/v1/retention", handle: (*Server).setRetention, cap: capWrite(fsm.AreaOperator)},

		// Statistics and advice.
		{method: "GET", path: "/v1/stats", handle: (*Server).getStats, cap: capRead(fsm.AreaAllocations)},
		{method: "GET", path: "/v1/recommendations", handle: (*Server).getRecommendations, cap: capRead(fsm.AreaAllocations)},

		// Cluster and agent.
		{method: "GET", path: "/v1/cluster/members", handle: (*Server).getMembers, cap: capRead(fsm.AreaOperator)},
		{method: "GET", path: "/v1/cluster/leader", handle: (*Server).getLeader, cap: capRead(fsm.AreaOperator)},
		{method: "GET", path: "/v1/cluster/raft", handle: (*Server).getRaft, cap: capRead(fsm.AreaOperator)},
		{method: "DELETE", path: "/v1/cluster/raft/peers/{id}", handle: (*Server).removePeer, cap: capWrite(fsm.AreaOperator)},
		{method: "DELETE", path: "/v1/cluster/raft/removed/{id}", handle: (*Server).readmitPeer, cap: capWrite(fsm.AreaOperator)},
		{method: "GET", path: "/v1/agent/self", handle: (*Server).getAgentSelf, cap: capRead(fsm.AreaAgent)},
		{method: "GET", path: "/v1/snapshot", handle: (*Server).saveSnapshot, cap: capWrite(fsm.AreaOperator)},
		{method: "PUT", path: "/v1/snapshot", handle: (*Server).restoreSnapshot, body: transport.MaxRestoreBytes, cap: capWrite(fsm.AreaOperator)},

		// ACLs.
		{method: "POST", path: "/v1/acl/bootstrap", handle: (*Server).aclBootstrap, cap: capAnyone},
		{method: "GET", path: "/v1/acl/policies", handle: (*Server).aclPolicyList, cap: capRead(fsm.AreaOperator)},
		{method: "GET", path: "/v1/acl/policy/{name}", handle: (*Server).aclPolicyRead, cap: capRead(fsm.AreaOperator)},
		{method: "PUT", path: "/v1/acl/policy/{name}", handle: (*Server).aclPolicyApply, cap: capWrite(fsm.AreaOperator)},
		{method: "DELETE", path: "/v1/acl/policy/{name}", handle: (*Server).aclPolicyDelete, cap: capWrite(fsm.AreaOperator)},
		{method: "POST", path: "/v1/acl/token", handle: (*Server).aclTokenCreate, cap: capWrite(fsm.AreaOperator)},
		{method: "GET", path: "/v1/acl/tokens", handle: (*Server).aclTokenList, cap: capRead(fsm.AreaOperator)},
		{method: "GET", path: "/v1/acl/token/self", handle: (*Server).aclTokenSelf, cap: capAnyToken},
		{method: "GET", path: "/v1/acl/token/{accessor}", handle: (*Server).aclTokenRead, cap: capRead(fsm.AreaOperator)},
		{method: "PUT", path: "/v1/acl/token/{accessor}", handle: (*Server).aclTokenUpdate, cap: capWrite(fsm.AreaOperator)},
		{method: "DELETE", path: "/v1/acl/token/{accessor}", handle: (*Server).aclTokenDelete, cap: capWrite(fsm.AreaOperator)},

		// Gossip keyring.
		{method: "GET", path: "/v1/operator/keyring", handle: (*Server).listKeyring, cap: capRead(fsm.AreaOperator)},
		{method: "POST", path: "/v1/operator/keyring", handle: (*Server).installKey, cap: capWrite(fsm.AreaOperator)},
		{method: "PUT", path: "/v1/operator/keyring", handle: (*Server).useKey, cap: capWrite(fsm.AreaOperator)},
		{method: "DELETE", path: "/v1/operator/keyring", handle: (*Server).removeKey, cap: capWrite(fsm.AreaOperator)},

		// Probes and metrics.
		{method: "GET", path: "/v1/health", handle: (*Server).getHealth, exempt: true, cap: capAnyone},
		{method: "GET", path: "/v1/ready", handle: (*Server).getReady, exempt: true, cap: capAnyone},
		{method: "GET", path: "/metrics", handle: (*Server).getMetrics, exempt: true, cap: capRead(fsm.AreaAgent)},

		// Profiling, with Options.EnableDebug.
		{method: "GET", path: "/debug/pprof/", handle: pprofRoute(pprof.Index), debug: true, exempt: true, cap: capRead(fsm.AreaAgent)},
		{method: "GET", path: "/debug/pprof/cmdline", handle: pprofRoute(pprof.Cmdline), debug: true, exempt: true, cap: capRead(fsm.AreaAgent)},
		{method: "GET", path: "/debug/pprof/profile", handle: pprofRoute(pprof.Profile), debug: true, exempt: true, cap: capRead(fsm.AreaAgent)},
		{method: "GET", path: "/debug/pprof/symbol", handle: pprofRoute(pprof.Symbol), debug: true, exempt: true, cap: capRead(fsm.AreaAgent)},
		{method: "POST", path: "/debug/pprof/symbol", handle: pprofRoute(pprof.Symbol), debug: true, exempt: true, cap: capRead(fsm.AreaAgent)},
		{method: "GET", path: "/debug/pprof/trace", handle: pprofRoute(pprof.Trace), debug: true, exempt: true, cap: capRead(fsm.AreaAgent)},
	}
}
