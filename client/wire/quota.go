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

// QuotaRequest is the body of PUT /v1/quotas/{namespace}.
type QuotaRequest struct {
	Limits    []QuotaLimit `json:"limits"`
	RequestID string       `json:"request_id,omitempty"`
}

// QuotaUse is one limit of a quota with what the namespace holds under it.
type QuotaUse struct {
	Limit  QuotaLimit `json:"limit"`
	Count  int        `json:"count"`
	Amount Resources  `json:"amount"`
}

// Quota is a namespace's quota and its use (GET /v1/quotas).
type Quota struct {
	Namespace   string     `json:"namespace"`
	Limits      []QuotaUse `json:"limits"`
	ModifyIndex uint64     `json:"modify_index"`
}
