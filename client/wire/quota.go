package wire

// QuotaLimit bounds what a namespace's active allocations hold of one
// device type, in one pool or (Pool empty) in all pools together: the
// number of devices (whole or in part) and each amount that is set.
type QuotaLimit struct {
	Type      DeviceType `json:"type"`
	Pool      string     `json:"pool,omitempty"`
	MaxCount  *int       `json:"max_count,omitempty"`
	MaxAmount Resources  `json:"max_amount"`
}

// QuotaSpec is a namespace's quota as it is set: its limits, its
// fair-share weight (0: 1), and whether it may borrow idle capacity past
// its max counts, with the grace its borrowed allocations get when an
// owner reclaims them (0: 30s).
type QuotaSpec struct {
	Limits       []QuotaLimit `json:"limits"`
	Weight       float64      `json:"weight,omitempty"`
	Borrow       bool         `json:"borrow,omitempty"`
	ReclaimGrace Duration     `json:"reclaim_grace,omitempty"`
}

// QuotaRequest is the body of PUT /v1/quotas/{namespace}.
type QuotaRequest struct {
	QuotaSpec
	RequestID string `json:"request_id,omitempty"`
}

// QuotaUse is one limit of a quota with what the namespace holds under it.
type QuotaUse struct {
	Limit  QuotaLimit `json:"limit"`
	Count  int        `json:"count"`
	Amount Resources  `json:"amount"`
}

// Quota is a namespace's quota and its use (GET /v1/quotas).
type Quota struct {
	Namespace    string     `json:"namespace"`
	Limits       []QuotaUse `json:"limits"`
	Weight       float64    `json:"weight"`
	Borrow       bool       `json:"borrow,omitempty"`
	ReclaimGrace Duration   `json:"reclaim_grace,omitempty"`
	ModifyIndex  uint64     `json:"modify_index"`
}
