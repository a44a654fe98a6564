package wire

import "time"

// ACLRules are what an ACL policy grants. An access is "read", "write"
// (which includes read), "deny" (which overrides every other policy of
// the token) or empty.
type ACLRules struct {
	// Namespaces grants access to the allocations of each namespace; "*"
	// is any namespace not named.
	Namespaces map[string]string `json:"namespaces,omitempty"`
	// Devices covers devices and hosts: lists, status, drain, host
	// registration and removal.
	Devices string `json:"devices,omitempty"`
	// Policies covers placement policies and pools.
	Policies string `json:"policies,omitempty"`
	// Operator covers Raft peers, snapshots, retention, the gossip keyring
	// and ACLs themselves.
	Operator string `json:"operator,omitempty"`
	// Agent covers the agent itself: /v1/agent/self, /metrics, pprof.
	Agent string `json:"agent,omitempty"`
	// HostRegister names the hosts a holder may register as ("*": any).
	HostRegister []string `json:"host_register,omitempty"`
}

// ACLPolicy is a named set of rules (GET /v1/acl/policy/{name}).
type ACLPolicy struct {
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Rules       ACLRules `json:"rules"`
	CreateIndex uint64   `json:"create_index"`
	ModifyIndex uint64   `json:"modify_index"`
}

// ACLPolicyRequest is the body of PUT /v1/acl/policy/{name}.
type ACLPolicyRequest struct {
	Description string   `json:"description,omitempty"`
	Rules       ACLRules `json:"rules"`
	RequestID   string   `json:"request_id,omitempty"`
}

// ACLToken is a token as the API shows it. SecretID is set only in the
// answer that created the token: the cluster keeps only its hash.
type ACLToken struct {
	AccessorID  string     `json:"accessor_id"`
	SecretID    string     `json:"secret_id,omitempty"`
	Description string     `json:"description,omitempty"`
	Policies    []string   `json:"policies"`
	Management  bool       `json:"management,omitempty"`
	ExpiresAt   *time.Time `json:"expires_at,omitempty"`
	CreateTime  time.Time  `json:"create_time"`
	CreateIndex uint64     `json:"create_index"`
	ModifyIndex uint64     `json:"modify_index"`
}

// ACLTokenRequest is the body of POST /v1/acl/token (create) and PUT
// /v1/acl/token/{accessor} (update: description and policies only; the
// anonymous token takes policies only).
type ACLTokenRequest struct {
	Description string   `json:"description,omitempty"`
	Policies    []string `json:"policies"`
	// TTL, on create, ends the token that long after it was made.
	TTL Duration `json:"ttl,omitempty"`
	// SecretID, on create, is the token's secret, chosen by the caller
	// (e.g. one a host agent was started with before the token existed);
	// empty: the cluster makes a random one. It must be
	// ACLSecretMinLength to ACLSecretMaxLength printable ASCII characters
	// without spaces (a UUID is one such); a secret another token has is
	// a conflict.
	SecretID  string `json:"secret_id,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}

// The length bounds of a token secret given on create.
const (
	ACLSecretMinLength = 16
	ACLSecretMaxLength = 128
)

// ValidACLSecret reports whether s may be given as a token's secret:
// ACLSecretMinLength to ACLSecretMaxLength printable ASCII characters
// (0x21 to 0x7e), no spaces.
func ValidACLSecret(s string) bool {
	if len(s) < ACLSecretMinLength || len(s) > ACLSecretMaxLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
