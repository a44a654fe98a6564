package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
)

// metrics are the Prometheus metrics of one Server, in a registry of its
// own: request counts and latencies by route and status code, the latency
// of writes through Raft by command, and gauges of the scheduler state
// computed from a local read at each scrape.
type metrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	apply    *prometheus.HistogramVec
	handler  http.Handler
}

func newMetrics(s *Server) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dmsc_http_requests_total",
			Help: "HTTP API requests by route pattern and status code.",
		}, []string{"route", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dmsc_http_request_duration_seconds",
			Help:    "HTTP API request latency by route pattern and status code.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18),
		}, []string{"route", "code"}),
		apply: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dmsc_raft_apply_duration_seconds",
			Help:    "Time for a write to be committed and applied through Raft (forwarding included), by command and outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"command", "outcome"}),
	}
	m.reg.MustRegister(m.requests, m.latency, m.apply, &stateCollector{s: s},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

func (m *metrics) observe(route string, code int, d time.Duration) {
	c := strconv.Itoa(code)
	m.requests.WithLabelValues(route, c).Inc()
	m.latency.WithLabelValues(route, c).Observe(d.Seconds())
}

func (m *metrics) observeApply(cmd fsm.Command, err error, d time.Duration) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.apply.WithLabelValues(commandName(cmd), outcome).Observe(d.Seconds())
}

// commandName is the metric label of a command.
func commandName(cmd fsm.Command) string {
	switch cmd.Type() {
	case fsm.RegisterHostType:
		return "register_host"
	case fsm.RemoveHostType:
		return "remove_host"
	case fsm.SetHostStatusType:
		return "set_host_status"
	case fsm.SetDeviceStatusType:
		return "set_device_status"
	case fsm.DrainHostType:
		return "drain_host"
	case fsm.AllocateType:
		return "allocate"
	case fsm.ReleaseType:
		return "release"
	case fsm.RenewType:
		return "renew"
	case fsm.CancelType:
		return "cancel"
	case fsm.SetPolicyType:
		return "set_policy"
	case fsm.SetRetentionType:
		return "set_retention"
	case fsm.TickType:
		return "tick"
	}
	return "other"
}

// GET /metrics
func (s *Server) getMetrics(w http.ResponseWriter, r *http.Request) error {
	s.metrics.handler.ServeHTTP(w, r)
	return nil
}

// scrapeReadTimeout bounds the state read of a scrape.
const scrapeReadTimeout = 5 * time.Second

var (
	descIndex = prometheus.NewDesc("dmsc_state_index",
		"Log index of the last command that changed the local replica.", nil, nil)
	descKnownLeader = prometheus.NewDesc("dmsc_known_leader",
		"1 when this node knows a leader.", nil, nil)
	descIsLeader = prometheus.NewDesc("dmsc_raft_leader",
		"1 when this node is the Raft leader.", nil, nil)
	descLastContact = prometheus.NewDesc("dmsc_raft_last_contact_seconds",
		"Time since this node last heard from the leader (0 on the leader, -1 never).", nil, nil)
	descCommitIndex = prometheus.NewDesc("dmsc_raft_commit_index",
		"Raft commit index this node knows.", nil, nil)
	descAppliedIndex = prometheus.NewDesc("dmsc_raft_applied_index",
		"Raft index this node has applied.", nil, nil)
	descRegistrations = prometheus.NewDesc("dmsc_host_registrations_total",
		"RegisterHost commands this server's replica applied since it started (log replay included).", nil, nil)
	descDivergence = prometheus.NewDesc("dmsc_state_divergence",
		"1 when this server has seen the state hashes of servers differ at the same index.", nil, nil)
	descReplicaFailed = prometheus.NewDesc("dmsc_replica_failed",
		"1 when this server's replica failed its integrity check (halted or divergent): it answers no reads.", nil, nil)
	descQueue = prometheus.NewDesc("dmsc_queue_length",
		"Pending allocation requests waiting for capacity.", nil, nil)
	descAllocations = prometheus.NewDesc("dmsc_allocations",
		"Allocations in the replicated state (live and retained history) by primary device type and status.",
		[]string{"type", "status"}, nil)
	descUtilisation = prometheus.NewDesc("dmsc_device_utilisation",
		"Mean used share of the schedulable devices of a type (0..1).", []string{"type"}, nil)
	descFragmentation = prometheus.NewDesc("dmsc_device_fragmentation",
		"Share of the free capacity of a type that typical recent requests cannot use (0..1).", []string{"type"}, nil)
	descDevices = prometheus.NewDesc("dmsc_devices",
		"Devices by type and status (in_use counts devices holding an allocation).", []string{"type", "status"}, nil)
	descHosts = prometheus.NewDesc("dmsc_hosts",
		"Registered hosts by state.", []string{"state"}, nil)
	descStateHosts = prometheus.NewDesc("dmsc_state_hosts",
		"Hosts in the replicated state.", nil, nil)
	descStateDevices = prometheus.NewDesc("dmsc_state_devices",
		"Devices in the replicated state.", nil, nil)
	descStateLive = prometheus.NewDesc("dmsc_state_allocations_live",
		"Live (pending and active) allocations in the replicated state.", nil, nil)
	descStateHistory = prometheus.NewDesc("dmsc_state_history_records",
		"Ended allocations the history keeps (bounded by the retention max_count and max_age).", nil, nil)
	descStateBytes = prometheus.NewDesc("dmsc_state_estimated_bytes",
		"Estimated heap bytes of the replicated state: the counts above times the measured bytes per item (BENCHMARKS.md, Memory).", nil, nil)
)

// stateCollector reads the local replica at each scrape.
type stateCollector struct{ s *Server }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descIndex, descKnownLeader, descIsLeader, descLastContact, descCommitIndex,
		descAppliedIndex, descRegistrations, descDivergence, descReplicaFailed, descQueue, descAllocations, descUtilisation, descFragmentation, descDevices, descHosts,
		descStateHosts, descStateDevices, descStateLive, descStateHistory, descStateBytes} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	st := c.s.b.Status()
	gauge(descKnownLeader, boolFloat(st.KnownLeader))
	gauge(descIsLeader, boolFloat(st.State == "Leader"))
	if st.Server {
		lc := -1.0
		if st.LastContact >= 0 {
			lc = st.LastContact.Seconds()
		}
		gauge(descLastContact, lc)
		gauge(descCommitIndex, float64(st.CommitIndex))
		gauge(descAppliedIndex, float64(st.AppliedIndex))
		ch <- prometheus.MustNewConstMetric(descRegistrations, prometheus.CounterValue, float64(st.HostRegistrations))
		gauge(descDivergence, boolFloat(st.Divergence != ""))
		gauge(descReplicaFailed, boolFloat(st.Integrity != ""))
	}

	var (
		queue    int
		stats    []fsm.Stats
		up, down int
		sizes    fsm.Sizes
	)
	ctx, cancel := context.WithTimeout(context.Background(), scrapeReadTimeout)
	defer cancel()
	meta, err := c.s.b.Read(ctx, cluster.ReadOptions{}, func(s *fsm.State) {
		queue = len(s.Queue())
		sizes = s.Sizes()
		stats = s.Stats(fsm.StatsFilter{Pool: fsm.AllPools})
		for _, h := range s.Hosts() {
			if h.Up {
				up++
			} else {
				down++
			}
		}
	})
	if err != nil {
		// A host holds no replica: it has no state gauges.
		return
	}
	gauge(descIndex, float64(meta.Index))
	gauge(descQueue, float64(queue))
	gauge(descHosts, float64(up), "up")
	gauge(descHosts, float64(down), "down")
	gauge(descStateHosts, float64(sizes.Hosts))
	gauge(descStateDevices, float64(sizes.Devices))
	gauge(descStateLive, float64(sizes.LiveAllocations))
	gauge(descStateHistory, float64(sizes.HistoryRecords))
	gauge(descStateBytes, float64(sizes.EstimatedBytes()))
	for _, t := range stats {
		typ := string(t.Type)
		n := t.Counts
		for _, sc := range []struct {
			status fsm.AllocStatus
			count  int
		}{
			{fsm.Pending, n.Pending}, {fsm.Active, n.Active}, {fsm.Released, n.Released}, {fsm.Expired, n.Expired},
			{fsm.TimedOut, n.TimedOut}, {fsm.Preempted, n.Preempted}, {fsm.Lost, n.Lost}, {fsm.Failed, n.Failed},
			{fsm.Cancelled, n.Cancelled}, {fsm.Drained, n.Drained},
		} {
			gauge(descAllocations, float64(sc.count), typ, string(sc.status))
		}
		gauge(descUtilisation, t.Utilisation, typ)
		gauge(descFragmentation, t.Fragmentation, typ)
		d := t.Devices
		gauge(descDevices, float64(d.Available), typ, string(fsm.Available))
		gauge(descDevices, float64(d.Draining), typ, string(fsm.Draining))
		gauge(descDevices, float64(d.Unhealthy), typ, string(fsm.Unhealthy))
		gauge(descDevices, float64(d.Offline), typ, string(fsm.Offline))
		gauge(descDevices, float64(d.InUse), typ, "in_use")
	}
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
