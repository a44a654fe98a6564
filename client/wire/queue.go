package wire

// QueueConfig is how the queue is served (GET and PUT /v1/queue/config):
// by each namespace's fair share, with a usage half-life (0 when off;
// default 7 days), and whether waiting requests may preempt lower-priority
// work each time the queue is examined rather than on arrival only.
type QueueConfig struct {
	FairShare      bool     `json:"fair_share"`
	HalfLife       Duration `json:"half_life,omitempty"`
	PreemptWaiting bool     `json:"preempt_waiting"`
}

// QueueConfigRequest is the body of PUT /v1/queue/config: the whole
// configuration (what it leaves out is off).
type QueueConfigRequest struct {
	QueueConfig
	RequestID string `json:"request_id,omitempty"`
}

// FairShareUse is a namespace's fair-share figures for one device type:
// devices held now, usage decayed by the half-life as devices held on
// average lately, weight, and score = (held + recent) / weight. The
// queue serves first the namespaces whose score is below the share line.
type FairShareUse struct {
	Namespace string     `json:"namespace"`
	Type      DeviceType `json:"type"`
	Weight    float64    `json:"weight"`
	Held      int        `json:"held"`
	Recent    float64    `json:"recent"`
	Score     float64    `json:"score"`
}

// QueueStatus is the queue configuration with the fair-share figures of
// the namespaces the token may read (GET /v1/queue/config).
type QueueStatus struct {
	QueueConfig
	Usage []FairShareUse `json:"usage"`
}
