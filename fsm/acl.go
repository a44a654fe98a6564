package fsm

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sort"
)

// ACLs, as Nomad and Consul have them: policies are rules granting access
// per area (and, for allocations, per namespace); tokens carry policies.
// The state keeps them replicated: a token's secret only as its SHA-256
// (the API hashes what a client sends), so neither the log nor a snapshot
// holds a usable secret. What a token may do is decided by the API layer
// with Authorizer; the state machine only keeps the rules.

// Access is what a rule grants in an area.
type Access string

// Accesses: deny overrides everything; write includes read.
const (
	AccessNone  Access = ""
	AccessRead  Access = "read"
	AccessWrite Access = "write"
	AccessDeny  Access = "deny"
)

func (a Access) valid() bool {
	return a == AccessNone || a == AccessRead || a == AccessWrite || a == AccessDeny
}

// rank orders accesses for merging: deny wins, then write, then read.
func (a Access) rank() int {
	switch a {
	case AccessDeny:
		return 3
	case AccessWrite:
		return 2
	case AccessRead:
		return 1
	}
	return 0
}

// Area is a part of the API a rule grants access to.
type Area string

// The areas. Allocations are per namespace; the others are the cluster's.
const (
	AreaAllocations Area = "allocations"
	AreaDevices     Area = "devices"  // hosts and devices: lists, drain, status, registration, removal
	AreaPolicies    Area = "policies" // placement policies and pools
	AreaOperator    Area = "operator" // Raft peers, snapshots, retention, gossip keys, ACLs
	AreaAgent       Area = "agent"    // the agent itself: self, metrics, pprof
)

// ACLRules are what a policy grants.
type ACLRules struct {
	// Namespaces grants access to the allocations of each namespace ("*":
	// any namespace not named).
	Namespaces map[string]Access `json:"namespaces,omitempty"`
	Devices    Access            `json:"devices,omitempty"`
	Policies   Access            `json:"policies,omitempty"`
	Operator   Access            `json:"operator,omitempty"`
	Agent      Access            `json:"agent,omitempty"`
	// HostRegister names the hosts a holder may register devices as (a
	// host agent's own node); "*" any host.
	HostRegister []string `json:"host_register,omitempty"`
}

// ACLPolicy is a named set of rules.
type ACLPolicy struct {
	Name        string   `json:"name"`
	Description string   `json:"description,omitempty"`
	Rules       ACLRules `json:"rules"`
	CreateIndex uint64   `json:"create_index"`
	ModifyIndex uint64   `json:"modify_index"`
}

// ACLToken is a token: its accessor is public, its secret known only to
// its holder (the state keeps SecretHash). A management token may do
// everything; the others what their policies grant.
type ACLToken struct {
	AccessorID  string   `json:"accessor_id"`
	SecretHash  string   `json:"secret_hash,omitempty"`
	Description string   `json:"description,omitempty"`
	Policies    []string `json:"policies,omitempty"`
	Management  bool     `json:"management,omitempty"`
	// ExpiresAt, when set, ends the token (Unix nanoseconds).
	ExpiresAt   int64  `json:"expires_at,omitempty"`
	CreateTime  int64  `json:"create_time"`
	CreateIndex uint64 `json:"create_index"`
	ModifyIndex uint64 `json:"modify_index"`
}

// AnonymousAccessorID is the token of requests that carry none. It always
// exists and has no secret; what it may do is set by giving it policies.
const AnonymousAccessorID = "anonymous"

// ACLBootstrap creates the first management token, once.
type ACLBootstrap struct {
	Meta
	Token ACLToken `json:"token"`
}

// ACLPolicyUpsert creates or replaces a policy.
type ACLPolicyUpsert struct {
	Meta
	Policy ACLPolicy `json:"policy"`
}

// ACLPolicyDelete deletes a policy; tokens that name it lose what it
// granted.
type ACLPolicyDelete struct {
	Meta
	Name string `json:"name"`
}

// ACLTokenUpsert creates or replaces a token (the anonymous token: its
// policies only).
type ACLTokenUpsert struct {
	Meta
	Token ACLToken `json:"token"`
	// TTL, when set, ends the token that long after the command's time
	// (ExpiresAt = Time + TTL), so that the expiry comes from the leader's
	// clock.
	TTL int64 `json:"ttl,omitempty"`
}

// ACLTokenDelete deletes a token.
type ACLTokenDelete struct {
	Meta
	AccessorID string `json:"accessor_id"`
}

// aclState is the replicated ACL state.
type aclState struct {
	bootstrapIndex uint64
	policies       map[string]*ACLPolicy
	tokens         map[string]*ACLToken // by accessor
	bySecret       map[string]string    // secret hash → accessor (derived)
}

func newACLState() *aclState {
	return &aclState{
		policies: map[string]*ACLPolicy{},
		tokens:   map[string]*ACLToken{AnonymousAccessorID: {AccessorID: AnonymousAccessorID, Description: "requests without a token"}},
		bySecret: map[string]string{},
	}
}

// Limits on ACL objects.
const (
	MaxACLNameLength        = 128
	MaxACLPolicies          = 64
	MaxACLDescriptionLength = 1024
)

func validACLName(s string) bool {
	if s == "" || len(s) > MaxACLNameLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// HashACLSecret is what the state keeps of a token's secret, and what a
// secret is looked up by: its SHA-256 in lower-case hex.
func HashACLSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// validSecretHash is 64 lower-case hex digits.
func validSecretHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

func validateRules(r *ACLRules) *Error {
	for _, a := range []Access{r.Devices, r.Policies, r.Operator, r.Agent} {
		if !a.valid() {
			return errf(ErrInvalid, "access %q is not read, write or deny", a)
		}
	}
	for _, ns := range sortedKeys(r.Namespaces) {
		if ns != "*" && !ValidNamespace(ns) {
			return errf(ErrInvalid, "namespace %q in a rule is not valid", ns)
		}
		if !r.Namespaces[ns].valid() {
			return errf(ErrInvalid, "access %q for namespace %q is not read, write or deny", r.Namespaces[ns], ns)
		}
	}
	for _, h := range r.HostRegister {
		if h != "*" && !ValidID(h) {
			return errf(ErrInvalid, "host %q in a rule is not a valid id", h)
		}
	}
	return nil
}

func (s *State) aclBootstrap(idx uint64, c *ACLBootstrap) Result {
	if s.acl.bootstrapIndex != 0 {
		return Result{Err: errf(ErrConflict, "ACLs were bootstrapped at index %d", s.acl.bootstrapIndex)}
	}
	t := c.Token
	t.Management, t.Policies = true, nil
	if err := s.validateToken(&t); err != nil {
		return Result{Err: err}
	}
	s.putToken(idx, &t)
	s.acl.bootstrapIndex = idx
	return Result{}
}

// checkPolicyShape judges what can be judged of a policy without the
// state: its name, description and rules (Precheck and Apply share it).
func checkPolicyShape(p *ACLPolicy) *Error {
	if !validACLName(p.Name) || len(p.Description) > MaxACLDescriptionLength {
		return errf(ErrInvalid, "policy name %q is not 1 to %d letters, digits, '-', '_' or '.' (or the description is over %d bytes)", p.Name, MaxACLNameLength, MaxACLDescriptionLength)
	}
	return validateRules(&p.Rules)
}

// checkTokenShape judges what can be judged of a token without the state
// (Precheck and Apply share it).
func checkTokenShape(t *ACLToken) *Error {
	switch {
	case t.AccessorID == AnonymousAccessorID:
		if t.SecretHash != "" || t.Management || t.ExpiresAt != 0 {
			return errf(ErrInvalid, "the anonymous token takes policies only")
		}
	case !validACLName(t.AccessorID):
		return errf(ErrInvalid, "accessor id %q is not 1 to %d letters, digits, '-', '_' or '.'", t.AccessorID, MaxACLNameLength)
	case !validSecretHash(t.SecretHash):
		return errf(ErrInvalid, "secret hash is not a SHA-256 in hex")
	}
	if len(t.Policies) > MaxACLPolicies {
		return errf(ErrInvalid, "a token names at most %d policies", MaxACLPolicies)
	}
	if t.ExpiresAt < 0 || len(t.Description) > MaxACLDescriptionLength {
		return errf(ErrInvalid, "bad expiry or a description over %d bytes", MaxACLDescriptionLength)
	}
	for _, p := range t.Policies {
		if !validACLName(p) {
			return errf(ErrInvalid, "policy name %q is not 1 to %d letters, digits, '-', '_' or '.'", p, MaxACLNameLength)
		}
	}
	return nil
}

func (s *State) validateToken(t *ACLToken) *Error {
	if err := checkTokenShape(t); err != nil {
		return err
	}
	for _, p := range t.Policies {
		if s.acl.policies[p] == nil {
			return errf(ErrNotFound, "policy %q", p)
		}
	}
	if other, ok := s.acl.bySecret[t.SecretHash]; ok && t.SecretHash != "" && other != t.AccessorID {
		return errf(ErrConflict, "another token has this secret")
	}
	return nil
}

// putToken stores a token, keeping the secret index.
func (s *State) putToken(idx uint64, t *ACLToken) {
	t.Policies = slices.Clone(t.Policies)
	sort.Strings(t.Policies)
	t.Policies = slices.Compact(t.Policies)
	if old := s.acl.tokens[t.AccessorID]; old != nil {
		delete(s.acl.bySecret, old.SecretHash)
		t.CreateIndex, t.CreateTime = old.CreateIndex, old.CreateTime
	} else {
		t.CreateIndex, t.CreateTime = idx, s.now
	}
	t.ModifyIndex = idx
	s.acl.tokens[t.AccessorID] = t
	if t.SecretHash != "" {
		s.acl.bySecret[t.SecretHash] = t.AccessorID
	}
}

func (s *State) aclPolicyUpsert(idx uint64, c *ACLPolicyUpsert) Result {
	p := c.Policy
	if err := checkPolicyShape(&p); err != nil {
		return Result{Err: err}
	}
	p.Rules.HostRegister = slices.Clone(p.Rules.HostRegister)
	sort.Strings(p.Rules.HostRegister)
	if old := s.acl.policies[p.Name]; old != nil {
		p.CreateIndex = old.CreateIndex
	} else {
		p.CreateIndex = idx
	}
	p.ModifyIndex = idx
	s.acl.policies[p.Name] = &p
	return Result{}
}

func (s *State) aclPolicyDelete(c *ACLPolicyDelete) Result {
	if s.acl.policies[c.Name] == nil {
		return Result{Err: errf(ErrNotFound, "policy %q", c.Name)}
	}
	delete(s.acl.policies, c.Name)
	for _, id := range sortedKeys(s.acl.tokens) {
		t := s.acl.tokens[id]
		t.Policies = slices.DeleteFunc(t.Policies, func(p string) bool { return p == c.Name })
	}
	return Result{}
}

func (s *State) aclTokenUpsert(idx uint64, c *ACLTokenUpsert) Result {
	t := c.Token
	if c.TTL < 0 {
		return Result{Err: errf(ErrInvalid, "negative token TTL")}
	}
	if c.TTL > 0 {
		t.ExpiresAt = c.Time + c.TTL
	}
	if old := s.acl.tokens[t.AccessorID]; old != nil && old.Management != t.Management {
		return Result{Err: errf(ErrInvalid, "a token's management flag cannot change")}
	}
	if err := s.validateToken(&t); err != nil {
		return Result{Err: err}
	}
	s.putToken(idx, &t)
	return Result{}
}

func (s *State) aclTokenDelete(c *ACLTokenDelete) Result {
	t := s.acl.tokens[c.AccessorID]
	switch {
	case t == nil:
		return Result{Err: errf(ErrNotFound, "token %q", c.AccessorID)}
	case c.AccessorID == AnonymousAccessorID:
		return Result{Err: errf(ErrInvalid, "the anonymous token cannot be deleted")}
	}
	delete(s.acl.bySecret, t.SecretHash)
	delete(s.acl.tokens, c.AccessorID)
	return Result{}
}

// ACLBootstrapped reports whether ACLs were bootstrapped, and at which
// index.
func (s *State) ACLBootstrapped() (bool, uint64) {
	return s.acl.bootstrapIndex != 0, s.acl.bootstrapIndex
}

// ACLPolicies returns every policy, by name.
func (s *State) ACLPolicies() []ACLPolicy {
	out := make([]ACLPolicy, 0, len(s.acl.policies))
	for _, n := range sortedKeys(s.acl.policies) {
		out = append(out, clonePolicy(s.acl.policies[n]))
	}
	return out
}

// ACLPolicy returns a policy by name.
func (s *State) ACLPolicy(name string) (ACLPolicy, bool) {
	p := s.acl.policies[name]
	if p == nil {
		return ACLPolicy{}, false
	}
	return clonePolicy(p), true
}

// ACLTokens returns every token, by accessor, the anonymous one included.
func (s *State) ACLTokens() []ACLToken {
	out := make([]ACLToken, 0, len(s.acl.tokens))
	for _, id := range sortedKeys(s.acl.tokens) {
		out = append(out, cloneToken(s.acl.tokens[id]))
	}
	return out
}

// ACLToken returns a token by accessor.
func (s *State) ACLToken(accessor string) (ACLToken, bool) {
	t := s.acl.tokens[accessor]
	if t == nil {
		return ACLToken{}, false
	}
	return cloneToken(t), true
}

// ACLTokenBySecretHash returns the token whose secret hashes to hash.
func (s *State) ACLTokenBySecretHash(hash string) (ACLToken, bool) {
	id, ok := s.acl.bySecret[hash]
	if !ok {
		return ACLToken{}, false
	}
	return s.ACLToken(id)
}

// TokenOfSecret is the token a request's secret names, by its hash: the
// anonymous token for "" (a request without a token).
func (s *State) TokenOfSecret(hash string) (ACLToken, bool) {
	if hash == "" {
		return s.ACLToken(AnonymousAccessorID)
	}
	return s.ACLTokenBySecretHash(hash)
}

func clonePolicy(p *ACLPolicy) ACLPolicy {
	c := *p
	c.Rules.Namespaces = nil
	if p.Rules.Namespaces != nil {
		c.Rules.Namespaces = map[string]Access{}
		for k, v := range p.Rules.Namespaces {
			c.Rules.Namespaces[k] = v
		}
	}
	c.Rules.HostRegister = slices.Clone(p.Rules.HostRegister)
	return c
}

func cloneToken(t *ACLToken) ACLToken {
	c := *t
	c.Policies = slices.Clone(t.Policies)
	return c
}

// Authorizer is what a token may do: the merge of its policies' rules (a
// management token may do everything).
type Authorizer struct {
	management bool
	areas      map[Area]Access
	namespaces map[string]Access
	hosts      []string
}

// Authorizer merges the rules of a token's policies (NewAuthorizer with
// the policies the token names that exist).
func (s *State) Authorizer(t ACLToken) *Authorizer {
	return newAuthorizer(t.Management, t.Policies, func(name string) *ACLPolicy { return s.acl.policies[name] })
}

// NewAuthorizer merges the rules of policies for a token: those of
// policies that the token names (others, and names without a policy, are
// ignored). In each area deny wins over write, write over read; for a
// namespace, a rule naming it wins over "*". A node without a replica
// builds one from what a server sends it (the token and its policies).
func NewAuthorizer(t ACLToken, policies []ACLPolicy) *Authorizer {
	return newAuthorizer(t.Management, t.Policies, func(name string) *ACLPolicy {
		for i := range policies {
			if policies[i].Name == name {
				return &policies[i]
			}
		}
		return nil
	})
}

// newAuthorizer merges the rules of the named policies that lookup finds.
func newAuthorizer(management bool, names []string, lookup func(string) *ACLPolicy) *Authorizer {
	a := &Authorizer{management: management, areas: map[Area]Access{}, namespaces: map[string]Access{}}
	merge := func(cur, add Access) Access {
		if add.rank() > cur.rank() {
			return add
		}
		return cur
	}
	for _, name := range names {
		p := lookup(name)
		if p == nil {
			continue
		}
		r := &p.Rules
		for area, acc := range map[Area]Access{AreaDevices: r.Devices, AreaPolicies: r.Policies, AreaOperator: r.Operator, AreaAgent: r.Agent} {
			a.areas[area] = merge(a.areas[area], acc) // merging: order does not matter
		}
		for ns, acc := range r.Namespaces {
			a.namespaces[ns] = merge(a.namespaces[ns], acc)
		}
		a.hosts = append(a.hosts, r.HostRegister...)
	}
	return a
}

// ACLTokenPolicies returns the policies a token names that exist, in the
// token's order: what NewAuthorizer needs to decide for it.
func (s *State) ACLTokenPolicies(t ACLToken) []ACLPolicy {
	out := make([]ACLPolicy, 0, len(t.Policies))
	for _, name := range t.Policies {
		if p := s.acl.policies[name]; p != nil {
			out = append(out, clonePolicy(p))
		}
	}
	return out
}

// Management reports whether the token may do everything.
func (a *Authorizer) Management() bool { return a.management }

// Allowed reports whether the token may read (write false) or write in an
// area; ns names the namespace for AreaAllocations.
func (a *Authorizer) Allowed(area Area, ns string, write bool) bool {
	if a.management {
		return true
	}
	acc := a.areas[area]
	if area == AreaAllocations {
		var ok bool
		if acc, ok = a.namespaces[ns]; !ok {
			acc = a.namespaces["*"]
		}
	}
	switch acc {
	case AccessWrite:
		return true
	case AccessRead:
		return !write
	}
	return false
}

// ReadableNamespaces says which namespaces' allocations the token may
// read: all of them (a management token, or a "*" rule of read or write
// and no deny), else the namespaces its rules name with read or write.
func (a *Authorizer) ReadableNamespaces() (all bool, names []string) {
	if a.management {
		return true, nil
	}
	wild := a.namespaces["*"]
	all = wild == AccessRead || wild == AccessWrite
	for ns, acc := range a.namespaces {
		if acc == AccessDeny {
			all = false
		}
		if ns != "*" && (acc == AccessRead || acc == AccessWrite) {
			names = append(names, ns)
		}
	}
	sort.Strings(names)
	return all, names
}

// MayRegisterHost reports whether the token may register devices as host
// id.
func (a *Authorizer) MayRegisterHost(id string) bool {
	return a.management || slices.Contains(a.hosts, id) || slices.Contains(a.hosts, "*")
}
