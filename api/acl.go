package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/dmsc/dmsc/client/wire"
	"github.com/dmsc/dmsc/cluster"
	"github.com/dmsc/dmsc/fsm"
)

// The ACL check. With Options.ACLEnabled every request is checked, before
// its handler runs, against its route's capability: the token is read
// from X-Dmsc-Token or "Authorization: Bearer <secret>" (none is the
// anonymous token), looked up by its SHA-256 (Backend.ResolveToken: in
// the local replica on a server, through a server on a host agent), and
// its policies must grant the capability. Allocation routes are checked
// in the request's namespace. The caller (accessor, namespace) is put in
// the request's context for the handlers and the audit log.

// capKind is the kind of check a route needs.
type capKind uint8

const (
	// capArea: read or write in an area (allocations: in the request's
	// namespace).
	capArea capKind = iota
	// capNone: no token needed (probes, ACL bootstrap).
	capNone
	// capToken: any valid token, the anonymous one included.
	capToken
)

// capability is what a route requires when ACLs are on.
type capability struct {
	kind  capKind
	area  fsm.Area
	write bool
	// host also lets a token whose host_register names the path's {id}
	// through (a host registering itself).
	host bool
}

func capRead(a fsm.Area) capability  { return capability{area: a} }
func capWrite(a fsm.Area) capability { return capability{area: a, write: true} }

var (
	capAnyone   = capability{kind: capNone}
	capAnyToken = capability{kind: capToken}
)

// String is the capability as docs/api.md names it: "none", "token",
// or area:read / area:write.
func (c capability) String() string {
	switch c.kind {
	case capNone:
		return "none"
	case capToken:
		return "token"
	}
	if c.write {
		return string(c.area) + ":write"
	}
	return string(c.area) + ":read"
}

// namespaced reports whether the capability is checked in a namespace.
func (c capability) namespaced() bool { return c.kind == capArea && c.area == fsm.AreaAllocations }

// allows reports whether an authorizer grants the capability; ns is the
// request's namespace ("*": any namespace the token may read), host the
// path's {id}.
func (c capability) allows(a *fsm.Authorizer, ns, host string) bool {
	switch c.kind {
	case capNone, capToken:
		return true
	}
	if c.namespaced() && ns == "*" {
		all, names := a.ReadableNamespaces()
		return all || len(names) > 0
	}
	if a.Allowed(c.area, ns, c.write) {
		return true
	}
	return c.host && host != "" && a.MayRegisterHost(host)
}

// authzKey keys the request's *fsm.Authorizer in its context (absent
// while ACLs are off).
type authzKey struct{}

func authorizerOf(ctx context.Context) *fsm.Authorizer {
	a, _ := ctx.Value(authzKey{}).(*fsm.Authorizer)
	return a
}

var errACLDisabled = badRequest("ACLs are not enabled on this agent (acl { enabled = true } or -acl-enabled)")

func errUnauthorized(msg string) *apiError {
	return &apiError{status: http.StatusUnauthorized, code: wire.CodeUnauthorized, msg: msg}
}

func errPermissionDenied(rt route, ns string) *apiError {
	msg := "permission denied: " + rt.pattern() + " needs " + rt.need.String()
	if rt.need.namespaced() {
		msg += " in namespace " + ns
	}
	return &apiError{status: http.StatusForbidden, code: wire.CodePermissionDenied, msg: msg}
}

// authorize settles the request's namespace and, with ACLs on, checks its
// token against the route's capability. The returned request carries the
// caller (and the authorizer); it is returned with the error too, so that
// what follows knows who was refused.
func (s *Server) authorize(r *http.Request, rt route) (*http.Request, error) {
	var c caller
	if rt.need.namespaced() {
		ns, err := requestNamespace(r, rt)
		if err != nil {
			return r, err
		}
		c.namespace = ns
	}
	if !s.opts.ACLEnabled || rt.need.kind == capNone {
		return r.WithContext(withCaller(r.Context(), c)), nil
	}
	tok, authz, err := s.resolveToken(r)
	if err != nil {
		c.accessor = "unknown" // as accessorOf says, without resolving again
		return r.WithContext(withCaller(r.Context(), c)), err
	}
	c.accessor = tok.AccessorID
	r = r.WithContext(context.WithValue(withCaller(r.Context(), c), authzKey{}, authz))
	if !rt.need.allows(authz, c.namespace, r.PathValue("id")) {
		return r, errPermissionDenied(rt, c.namespace)
	}
	return r, nil
}

// tokenSecret is the secret a request carries: X-Dmsc-Token, else a
// bearer Authorization; "" for none.
func tokenSecret(r *http.Request) string {
	if t := r.Header.Get(wire.HeaderToken); t != "" {
		return t
	}
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// hashSecret is what the state keeps of a secret: its SHA-256 in hex.
func hashSecret(secret string) string { return fsm.HashACLSecret(secret) }

// resolveToken finds the request's token: in the local replica on a
// server, through a server (cached by the node) on a host. An unknown or
// expired secret is 401 unauthorized; no secret is the anonymous token.
func (s *Server) resolveToken(r *http.Request) (fsm.ACLToken, *fsm.Authorizer, error) {
	var hash string
	if secret := tokenSecret(r); secret != "" {
		hash = hashSecret(secret)
	}
	tok, authz, ok, err := s.b.ResolveToken(r.Context(), hash)
	switch {
	case err != nil:
		return tok, nil, err
	case !ok:
		return tok, nil, errUnauthorized("ACL token not found")
	case tok.ExpiresAt != 0 && tok.ExpiresAt <= time.Now().UnixNano():
		return tok, nil, errUnauthorized("ACL token expired")
	}
	return tok, authz, nil
}

// accessorOf names the token a request carries for the audit log: its
// accessor, "anonymous" for none, "unknown" for a secret no token has
// (or that could not be resolved).
func (s *Server) accessorOf(r *http.Request) string {
	tok, _, _ := s.resolveToken(r)
	if tok.AccessorID == "" {
		return "unknown"
	}
	return tok.AccessorID
}

// requestNamespace is the namespace an allocation route acts in:
// ?namespace=, or for a create the body's namespace (they must agree when
// both are given), else "default". "*" (every namespace the token may
// read) is for reads only.
func requestNamespace(r *http.Request, rt route) (string, error) {
	ns := r.URL.Query().Get("namespace")
	if rt.bodyNamespace && r.Body != nil {
		data, err := io.ReadAll(r.Body)
		if isTimeout(err) {
			return "", errBodyTimeout
		}
		if err != nil {
			return "", err // over the cap: *http.MaxBytesError, a 413
		}
		r.Body = io.NopCloser(bytes.NewReader(data))
		peek, _ := peekNamespace(data) // a bad body is the handler's 400
		switch {
		case ns == "":
			ns = peek
		case peek != "" && peek != ns:
			return "", badRequest("namespace %q in the body and ?namespace=%q differ", peek, ns)
		}
	}
	switch {
	case ns == "":
		return fsm.DefaultNamespace, nil
	case ns == "*" && !rt.need.write:
		return ns, nil
	case !fsm.ValidNamespace(ns):
		return "", badParam("namespace", ns, "want 1 to 64 letters, digits, '-', '_' or '.' (or * to read every namespace)")
	}
	return ns, nil
}

// namespaceFilter says which namespaces' allocations a read shows: the
// request's namespace, or for "*" every namespace the token may read.
func namespaceFilter(ctx context.Context) func(string) bool {
	ns := callerOf(ctx).namespace
	if ns != "*" {
		if ns == "" {
			ns = fsm.DefaultNamespace
		}
		return func(n string) bool { return n == ns }
	}
	authz := authorizerOf(ctx)
	if authz == nil {
		return func(string) bool { return true }
	}
	return func(n string) bool { return authz.Allowed(fsm.AreaAllocations, n, false) }
}

// statsNamespaces is the namespaces statistics and advice count: the
// request's, or for "*" those the token may read (nil: all).
func statsNamespaces(ctx context.Context) []string {
	ns := callerOf(ctx).namespace
	switch {
	case ns == "":
		return []string{fsm.DefaultNamespace}
	case ns != "*":
		return []string{ns}
	}
	authz := authorizerOf(ctx)
	if authz == nil {
		return nil
	}
	all, names := authz.ReadableNamespaces()
	if all {
		return nil
	}
	return names
}

// ACL endpoints.

func (s *Server) aclOn() error {
	if !s.opts.ACLEnabled {
		return errACLDisabled
	}
	return nil
}

// newSecret makes a token secret (a random UUID-formatted 128-bit value)
// and its hash.
func newSecret() (secret, hash string, err error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	secret = h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
	return secret, hashSecret(secret), nil
}

func aclRulesToWire(r fsm.ACLRules) wire.ACLRules {
	return wire.ACLRules{
		Namespaces: mapValues(r.Namespaces, func(k string) string { return k }, func(a fsm.Access) string { return string(a) }),
		Devices:    string(r.Devices), Policies: string(r.Policies), Operator: string(r.Operator), Agent: string(r.Agent),
		HostRegister: r.HostRegister,
	}
}

func aclRulesFromWire(r wire.ACLRules) fsm.ACLRules {
	return fsm.ACLRules{
		Namespaces: mapValues(r.Namespaces, func(k string) string { return k }, func(a string) fsm.Access { return fsm.Access(a) }),
		Devices:    fsm.Access(r.Devices), Policies: fsm.Access(r.Policies), Operator: fsm.Access(r.Operator), Agent: fsm.Access(r.Agent),
		HostRegister: r.HostRegister,
	}
}

func aclPolicyToWire(p fsm.ACLPolicy) wire.ACLPolicy {
	return wire.ACLPolicy{Name: p.Name, Description: p.Description, Rules: aclRulesToWire(p.Rules), CreateIndex: p.CreateIndex, ModifyIndex: p.ModifyIndex}
}

// aclTokenToWire shows a token without its secret hash.
func aclTokenToWire(t fsm.ACLToken) wire.ACLToken {
	out := wire.ACLToken{
		AccessorID: t.AccessorID, Description: t.Description, Policies: t.Policies, Management: t.Management,
		CreateTime: unixTime(t.CreateTime), CreateIndex: t.CreateIndex, ModifyIndex: t.ModifyIndex,
	}
	if out.Policies == nil {
		out.Policies = []string{}
	}
	if t.ExpiresAt != 0 {
		e := unixTime(t.ExpiresAt)
		out.ExpiresAt = &e
	}
	return out
}

// answerNewToken answers a token the request made, with its secret, once
// the local replica has it. A request ID reused from an earlier create
// answers the earlier result, whose secret this request does not know: a
// conflict.
func (s *Server) answerNewToken(w http.ResponseWriter, r *http.Request, res fsm.Result, accessor, hash, secret string) error {
	var (
		tok fsm.ACLToken
		ok  bool
	)
	if err := s.readAfter(w, r, res.Index, func(st *fsm.State) { tok, ok = st.ACLToken(accessor) }); err != nil {
		return err
	}
	if !ok || tok.SecretHash != hash {
		return &fsm.Error{Code: fsm.ErrConflict.Code, Message: "the request ID made a token earlier; its secret was in that answer"}
	}
	out := aclTokenToWire(tok)
	out.SecretID = secret
	writeJSON(w, r, http.StatusOK, out)
	return nil
}

// POST /v1/acl/bootstrap
func (s *Server) aclBootstrap(w http.ResponseWriter, r *http.Request) error {
	if err := s.aclOn(); err != nil {
		return err
	}
	body, err := decodeWrite(r.Body)
	if err != nil {
		return err
	}
	// Anyone may ask, so a cluster already bootstrapped answers from the
	// local replica without a log entry (the state machine still refuses
	// a second bootstrap that races this check).
	var (
		done bool
		at   uint64
	)
	if _, err := s.b.Read(r.Context(), cluster.ReadOptions{}, func(st *fsm.State) { done, at = st.ACLBootstrapped() }); err != nil {
		return err
	}
	if done {
		return &fsm.Error{Code: fsm.ErrConflict.Code, Message: fmt.Sprintf("ACLs were bootstrapped at index %d", at)}
	}
	secret, hash, err := newSecret()
	if err != nil {
		return err
	}
	accessor, _, err := newSecret()
	if err != nil {
		return err
	}
	cmd := &fsm.ACLBootstrap{Token: fsm.ACLToken{AccessorID: accessor, SecretHash: hash, Description: "Bootstrap management token"}}
	res, err := s.write(w, r, cmd, body.RequestID)
	if err != nil {
		return err
	}
	return s.answerNewToken(w, r, res, accessor, hash, secret)
}

// GET /v1/acl/policies
func (s *Server) aclPolicyList(w http.ResponseWriter, r *http.Request) error {
	if err := s.aclOn(); err != nil {
		return err
	}
	var out []fsm.ACLPolicy
	if err := s.read(w, r, func(st *fsm.State) { out = st.ACLPolicies() }); err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, mapSlice(out, aclPolicyToWire))
	return nil
}

// GET /v1/acl/policy/{name}
func (s *Server) aclPolicyRead(w http.ResponseWriter, r *http.Request) error {
	if err := s.aclOn(); err != nil {
		return err
	}
	name := r.PathValue("name")
	var (
		p  fsm.ACLPolicy
		ok bool
	)
	if err := s.read(w, r, func(st *fsm.State) { p, ok = st.ACLPolicy(name) }); err != nil {
		return err
	}
	if !ok {
		return notFound("ACL policy", name)
	}
	writeJSON(w, r, http.StatusOK, aclPolicyToWire(p))
	return nil
}

// PUT /v1/acl/policy/{name}
func (s *Server) aclPolicyApply(w http.ResponseWriter, r *http.Request) error {
	if err := s.aclOn(); err != nil {
		return err
	}
	var body wire.ACLPolicyRequest
	if err := decodeJSON(r.Body, &body, false); err != nil {
		return err
	}
	name := r.PathValue("name")
	cmd := &fsm.ACLPolicyUpsert{Policy: fsm.ACLPolicy{Name: name, Description: body.Description, Rules: aclRulesFromWire(body.Rules)}}
	res, err := s.write(w, r, cmd, body.RequestID)
	if err != nil {
		return err
	}
	var (
		p  fsm.ACLPolicy
		ok bool
	)
	if err := s.readAfter(w, r, res.Index, func(st *fsm.State) { p, ok = st.ACLPolicy(name) }); err != nil {
		return err
	}
	if !ok {
		return notFound("ACL policy", name)
	}
	writeJSON(w, r, http.StatusOK, aclPolicyToWire(p))
	return nil
}

// DELETE /v1/acl/policy/{name}
func (s *Server) aclPolicyDelete(w http.ResponseWriter, r *http.Request) error {
	if err := s.aclOn(); err != nil {
		return err
	}
	body, err := decodeWrite(r.Body)
	if err != nil {
		return err
	}
	res, err := s.write(w, r, &fsm.ACLPolicyDelete{Name: r.PathValue("name")}, body.RequestID)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, wire.WriteResult{Index: res.Index, RequestID: w.Header().Get(wire.HeaderRequestID)})
	return nil
}

// POST /v1/acl/token
func (s *Server) aclTokenCreate(w http.ResponseWriter, r *http.Request) error {
	if err := s.aclOn(); err != nil {
		return err
	}
	var body wire.ACLTokenRequest
	if err := decodeJSON(r.Body, &body, false); err != nil {
		return err
	}
	if body.TTL < 0 {
		return badRequest("ttl %s is negative", body.TTL.Std())
	}
	var (
		secret, hash string
		err          error
	)
	if body.SecretID != "" {
		if secret, hash, err = s.givenSecret(r, body.SecretID); err != nil {
			return err
		}
	} else if secret, hash, err = newSecret(); err != nil {
		return err
	}
	accessor, _, err := newSecret()
	if err != nil {
		return err
	}
	cmd := &fsm.ACLTokenUpsert{
		Token: fsm.ACLToken{AccessorID: accessor, SecretHash: hash, Description: body.Description, Policies: body.Policies},
		TTL:   int64(body.TTL.Std()),
	}
	res, err := s.write(w, r, cmd, body.RequestID)
	if err != nil {
		return err
	}
	return s.answerNewToken(w, r, res, accessor, hash, secret)
}

// givenSecret checks a secret a create names and hashes it: not a valid
// secret is 400, a secret another token has (in the local replica) 409;
// the state machine checks the latter again, in log order.
func (s *Server) givenSecret(r *http.Request, secret string) (string, string, error) {
	if !wire.ValidACLSecret(secret) {
		return "", "", badRequest("secret_id (not shown) is not %d to %d printable ASCII characters without spaces (a UUID is one such)", wire.ACLSecretMinLength, wire.ACLSecretMaxLength)
	}
	hash := hashSecret(secret)
	var taken bool
	if _, err := s.b.Read(r.Context(), cluster.ReadOptions{}, func(st *fsm.State) { _, taken = st.ACLTokenBySecretHash(hash) }); err != nil {
		return "", "", err
	}
	if taken {
		return "", "", &fsm.Error{Code: fsm.ErrConflict.Code, Message: "another token has this secret"}
	}
	return secret, hash, nil
}

// PUT /v1/acl/token/{accessor}
func (s *Server) aclTokenUpdate(w http.ResponseWriter, r *http.Request) error {
	if err := s.aclOn(); err != nil {
		return err
	}
	var body wire.ACLTokenRequest
	if err := decodeJSON(r.Body, &body, false); err != nil {
		return err
	}
	if body.TTL != 0 || body.SecretID != "" {
		return badRequest("a token's ttl and secret are set when it is created")
	}
	accessor := r.PathValue("accessor")
	var (
		tok fsm.ACLToken
		ok  bool
	)
	if _, err := s.b.Read(r.Context(), cluster.ReadOptions{}, func(st *fsm.State) { tok, ok = st.ACLToken(accessor) }); err != nil {
		return err
	}
	if !ok {
		return notFound("ACL token", accessor)
	}
	tok.Description, tok.Policies = body.Description, body.Policies
	if accessor == fsm.AnonymousAccessorID && body.Description == "" {
		tok.Description = "requests without a token"
	}
	res, err := s.write(w, r, &fsm.ACLTokenUpsert{Token: tok}, body.RequestID)
	if err != nil {
		return err
	}
	if err := s.readAfter(w, r, res.Index, func(st *fsm.State) { tok, ok = st.ACLToken(accessor) }); err != nil {
		return err
	}
	if !ok {
		return notFound("ACL token", accessor)
	}
	writeJSON(w, r, http.StatusOK, aclTokenToWire(tok))
	return nil
}

// GET /v1/acl/tokens
func (s *Server) aclTokenList(w http.ResponseWriter, r *http.Request) error {
	if err := s.aclOn(); err != nil {
		return err
	}
	var out []fsm.ACLToken
	if err := s.read(w, r, func(st *fsm.State) { out = st.ACLTokens() }); err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, mapSlice(out, aclTokenToWire))
	return nil
}

// readToken answers one token.
func (s *Server) readToken(w http.ResponseWriter, r *http.Request, accessor string) error {
	var (
		tok fsm.ACLToken
		ok  bool
	)
	if err := s.read(w, r, func(st *fsm.State) { tok, ok = st.ACLToken(accessor) }); err != nil {
		return err
	}
	if !ok {
		return notFound("ACL token", accessor)
	}
	writeJSON(w, r, http.StatusOK, aclTokenToWire(tok))
	return nil
}

// GET /v1/acl/token/{accessor}
func (s *Server) aclTokenRead(w http.ResponseWriter, r *http.Request) error {
	if err := s.aclOn(); err != nil {
		return err
	}
	return s.readToken(w, r, r.PathValue("accessor"))
}

// GET /v1/acl/token/self
func (s *Server) aclTokenSelf(w http.ResponseWriter, r *http.Request) error {
	if err := s.aclOn(); err != nil {
		return err
	}
	return s.readToken(w, r, callerOf(r.Context()).accessor)
}

// DELETE /v1/acl/token/{accessor}
func (s *Server) aclTokenDelete(w http.ResponseWriter, r *http.Request) error {
	if err := s.aclOn(); err != nil {
		return err
	}
	body, err := decodeWrite(r.Body)
	if err != nil {
		return err
	}
	res, err := s.write(w, r, &fsm.ACLTokenDelete{AccessorID: r.PathValue("accessor")}, body.RequestID)
	if err != nil {
		return err
	}
	writeJSON(w, r, http.StatusOK, wire.WriteResult{Index: res.Index, RequestID: w.Header().Get(wire.HeaderRequestID)})
	return nil
}
