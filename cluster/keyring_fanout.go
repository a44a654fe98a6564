package cluster

// A keyring operation across the gossip pool: a server asks every live
// member, itself included, to apply it (keyring.go has one node's part)
// and counts the keys they hold afterwards.

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/transport"
)

// keyringFanOutWidth bounds the members a keyring operation asks at once.
const keyringFanOutWidth = 32

// KeyringResult is the outcome of a keyring operation across the gossip
// pool: the keys the members hold after it, and the members that failed.
type KeyringResult struct {
	// Members is the number of live members asked, the answering server
	// included.
	Members int `json:"members"`
	// Keys are the keys the members that answered hold, the most used
	// primary key first.
	Keys []KeyringKey `json:"keys"`
	// Failed lists the members that did not apply the operation, and why.
	Failed []KeyringFailure `json:"failed,omitempty"`
}

// KeyringKey is one key of the pool's keyrings.
type KeyringKey struct {
	// Key is the key in base64.
	Key string `json:"key"`
	// Installed is how many members hold the key; Primary how many
	// encrypt with it.
	Installed int `json:"installed"`
	Primary   int `json:"primary"`
}

// KeyringFailure is a member that failed a keyring operation.
type KeyringFailure struct {
	Node  string `json:"node"`
	Error string `json:"error"`
}

// Keyring runs a keyring operation on every live member of the gossip
// pool, servers and hosts, this server included, and reports the keys
// they hold afterwards and the members that failed. Each member is asked
// within RPCTimeout; the keys are base64. Use is refused unless every
// live member holds the key, and remove while any member encrypts with it
// (fsm.ErrConflict, nothing changed). Servers only: a host answers
// ErrNotServer.
func (n *Node) Keyring(ctx context.Context, op KeyringOp, key string) (KeyringResult, error) {
	if n.raft == nil {
		return KeyringResult{}, clusterErr(ErrNotServer, "keyring operations run on servers")
	}
	if err := n.running(); err != nil {
		return KeyringResult{}, err
	}
	switch op {
	case KeyringList:
		key = ""
	case KeyringInstall, KeyringUse, KeyringRemove:
		raw, err := DecodeGossipKey(key)
		if err != nil {
			return KeyringResult{}, err
		}
		key = base64.StdEncoding.EncodeToString(raw)
	default:
		return KeyringResult{}, &fsm.Error{Code: fsm.ErrInvalid.Code, Message: fmt.Sprintf("unknown keyring operation %q", op)}
	}
	n.gossipKeys.mu.Lock()
	on := n.gossipKeys.ring != nil
	n.gossipKeys.mu.Unlock()
	if !on {
		return KeyringResult{}, &fsm.Error{Code: fsm.ErrConflict.Code, Message: "gossip encryption is off; " +
			"it is turned on by starting every agent with an encryption key, not at run time"}
	}
	if op == KeyringUse || op == KeyringRemove {
		if err := keyringPrecheck(op, key, n.keyringFanOut(ctx, KeyringList, "")); err != nil {
			return KeyringResult{}, err
		}
	}
	return n.keyringFanOut(ctx, op, key).result(), nil
}

// keyringPrecheck refuses a use of a key that some live member does not
// hold (or may not: it did not answer), and a remove of a key that some
// member encrypts with.
func keyringPrecheck(op KeyringOp, key string, list keyringAnswers) error {
	switch op {
	case KeyringUse:
		if failed := list.failed(); len(failed) > 0 {
			return &fsm.Error{Code: fsm.ErrConflict.Code, Message: fmt.Sprintf(
				"cannot make the key primary: %d of %d members did not say whether they hold it (%s)",
				len(failed), len(list), nodeList(failed))}
		}
		if missing := list.without(key); len(missing) > 0 {
			return &fsm.Error{Code: fsm.ErrConflict.Code, Message: fmt.Sprintf(
				"the key is installed on %d of %d members (missing on %s); install it on every member first",
				len(list)-len(missing), len(list), nodeList(missing))}
		}
	case KeyringRemove:
		if users := list.primaryOn(key); len(users) > 0 {
			return &fsm.Error{Code: fsm.ErrConflict.Code, Message: fmt.Sprintf(
				"the key is the primary key of %d of %d members (%s); make another key primary (use) before removing it",
				len(users), len(list), nodeList(users))}
		}
	}
	return nil
}

// nodeList names up to five nodes.
func nodeList(ids []string) string {
	if len(ids) > 5 {
		return strings.Join(ids[:5], ", ") + fmt.Sprintf(" and %d more", len(ids)-5)
	}
	return strings.Join(ids, ", ")
}

// keyringAnswer is one member's answer to a keyring operation.
type keyringAnswer struct {
	node string
	keys []string // base64, primary first
	err  error
}

type keyringAnswers []keyringAnswer

func (as keyringAnswers) failed() []string {
	var out []string
	for _, a := range as {
		if a.err != nil {
			out = append(out, a.node)
		}
	}
	return out
}

// without names the members that answered without the key.
func (as keyringAnswers) without(key string) []string {
	var out []string
	for _, a := range as {
		if a.err == nil && !slices.Contains(a.keys, key) {
			out = append(out, a.node)
		}
	}
	return out
}

// primaryOn names the members that answered with key as their primary.
func (as keyringAnswers) primaryOn(key string) []string {
	var out []string
	for _, a := range as {
		if a.err == nil && len(a.keys) > 0 && a.keys[0] == key {
			out = append(out, a.node)
		}
	}
	return out
}

// result counts the keys over the members.
func (as keyringAnswers) result() KeyringResult {
	res := KeyringResult{Members: len(as), Keys: []KeyringKey{}}
	counts := map[string]*KeyringKey{}
	for _, a := range as {
		if a.err != nil {
			res.Failed = append(res.Failed, KeyringFailure{Node: a.node, Error: a.err.Error()})
			continue
		}
		for i, k := range a.keys {
			c := counts[k]
			if c == nil {
				c = &KeyringKey{Key: k}
				counts[k] = c
			}
			c.Installed++
			if i == 0 {
				c.Primary++
			}
		}
	}
	for _, c := range counts {
		res.Keys = append(res.Keys, *c)
	}
	sort.Slice(res.Keys, func(i, j int) bool {
		a, b := res.Keys[i], res.Keys[j]
		if a.Primary != b.Primary {
			return a.Primary > b.Primary
		}
		if a.Installed != b.Installed {
			return a.Installed > b.Installed
		}
		return a.Key < b.Key
	})
	return res
}

// keyringFanOut applies op to every live member, at most
// keyringFanOutWidth at a time, each within RPCTimeout, and returns their
// answers sorted by node.
func (n *Node) keyringFanOut(ctx context.Context, op KeyringOp, key string) keyringAnswers {
	var targets []memberInfo
	self := false
	for _, m := range n.members.list() {
		if m.status == MemberAlive {
			targets = append(targets, m)
			self = self || m.id == n.cfg.NodeID
		}
	}
	if !self {
		targets = append(targets, memberInfo{id: n.cfg.NodeID})
	}
	answers := make(keyringAnswers, len(targets))
	sem := make(chan struct{}, keyringFanOutWidth)
	var wg sync.WaitGroup
	for i, m := range targets {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			answers[i] = n.keyringAsk(ctx, m, op, key)
		})
	}
	wg.Wait()
	sort.Slice(answers, func(i, j int) bool { return answers[i].node < answers[j].node })
	return answers
}

// keyringAsk applies op on one member: this node directly, another over
// the node RPC within RPCTimeout.
func (n *Node) keyringAsk(ctx context.Context, m memberInfo, op KeyringOp, key string) keyringAnswer {
	a := keyringAnswer{node: m.id}
	if m.id == n.cfg.NodeID {
		var raw []byte
		if op != KeyringList {
			raw, _ = base64.StdEncoding.DecodeString(key) // checked by Keyring
		}
		keys, err := n.keyringLocal(op, raw)
		a.keys, a.err = encodeKeys(keys), err
		return a
	}
	if m.meta.RPC == "" {
		a.err = errors.New("the member advertises no RPC address")
		return a
	}
	cctx, cancel := context.WithTimeout(ctx, n.cfg.RPCTimeout)
	defer cancel()
	// Only the member itself may answer for its keyring.
	if m.meta.server() {
		cctx = n.toServer(cctx, m.id)
	} else {
		cctx = toHost(cctx, m)
	}
	resp, err := n.rpc.Keyring(cctx, m.meta.RPC, transport.KeyringRequest{Op: string(op), Key: key})
	a.keys, a.err = resp.Keys, err
	return a
}
