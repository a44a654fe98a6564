package cluster

import (
	"context"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// TestHostTokens checks that with ACLs on the leader registers a host
// only when the token it sends may register that host: its own name in a
// policy's host_register. Without a token, with an unknown one, or with
// one for another host it stays out.
func TestHostTokens(t *testing.T) {
	tc := newTestCluster(t, func(c *Config) { c.ACLEnabled = true })
	servers := tc.servers(1)
	leader := tc.waitLeader(servers...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, cmd := range []fsm.Command{
		&fsm.ACLPolicyUpsert{Policy: fsm.ACLPolicy{Name: "host-good", Rules: fsm.ACLRules{HostRegister: []string{"acl-good"}}}},
		&fsm.ACLPolicyUpsert{Policy: fsm.ACLPolicy{Name: "host-else", Rules: fsm.ACLRules{HostRegister: []string{"somewhere-else"}}}},
		&fsm.ACLTokenUpsert{Token: fsm.ACLToken{AccessorID: "good", SecretHash: fsm.HashACLSecret("secret-good"), Policies: []string{"host-good"}}},
		&fsm.ACLTokenUpsert{Token: fsm.ACLToken{AccessorID: "else", SecretHash: fsm.HashACLSecret("secret-else"), Policies: []string{"host-else"}}},
	} {
		res, err := leader.Apply(ctx, cmd)
		if err == nil {
			err = res.Err
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range []struct{ id, token string }{
		{"acl-good", "secret-good"},
		{"acl-else", "secret-else"},
		{"acl-none", ""},
		{"acl-unknown", "secret-unknown"},
	} {
		inv := &inventory{devices: []fsm.DeviceSpec{gpu(h.id+"-gpu", 40)}}
		hc := tc.fastConfig(h.id, false)
		hc.Join = []string{servers[0].Self().GossipAddr}
		hc.Inventory = inv.get
		hc.ACLEnabled = true
		hc.ACLToken = h.token
		tc.start(hc)
	}
	waitHost(t, leader, "acl-good", true, 1, fsm.Available)
	// The others have been seen and refused by now; give them a few more
	// reconcile rounds.
	time.Sleep(5 * leader.cfg.ReconcileInterval)
	for _, id := range []string{"acl-else", "acl-none", "acl-unknown"} {
		if _, _, ok := hostView(t, leader, id); ok {
			t.Errorf("host %s was registered without a token that may register it", id)
		}
	}
}
