package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/dmsc/dmsc/fsm"
	"github.com/dmsc/dmsc/transport"
)

// refreshInventory reads the inventory and, when it changed, updates the
// hash this node advertises in gossip.
func (n *Node) refreshInventory() error {
	host, devices, err := n.cfg.Inventory()
	if err != nil {
		return fmt.Errorf("inventory: %w", err)
	}
	if len(devices) > fsm.MaxDevicesPerHost {
		return fmt.Errorf("inventory: %d devices, more than %d", len(devices), fsm.MaxDevicesPerHost)
	}
	host.ID = n.cfg.NodeID
	inv := transport.InventoryResponse{Host: host, Devices: devices}
	hash := transport.InventoryHash(inv)
	n.invMu.Lock()
	changed := hash != n.invHash
	n.inv, n.invHash = inv, hash
	n.invMu.Unlock()
	if changed && n.ml != nil {
		n.log.Info("inventory changed", "devices", len(devices), "hash", hash)
		if err := n.ml.UpdateNode(gossipTimeout(n.baseCtx)); err != nil {
			n.log.Warn("advertising the new inventory failed", "error", err)
		}
	}
	return nil
}

// RefreshInventory reads the inventory now instead of at the next
// InventoryInterval: a changed one is advertised in gossip at once, and
// the leader then fetches and registers it.
func (n *Node) RefreshInventory() error {
	if n.cfg.Inventory == nil {
		return clusterErr(ErrConfig, "node "+n.cfg.NodeID+" carries no devices")
	}
	if err := n.running(); err != nil {
		return err
	}
	return n.refreshInventory()
}

// inventoryLoop re-reads the inventory every InventoryInterval.
func (n *Node) inventoryLoop() {
	for n.sleep(n.cfg.InventoryInterval) {
		if err := n.refreshInventory(); err != nil {
			n.log.Warn("reading the inventory failed; keeping the last one", "error", err)
		}
	}
}

// RPCInventory answers a server asking for this host's devices.
func (n *Node) RPCInventory(ctx context.Context) (transport.InventoryResponse, error) {
	if n.cfg.Inventory == nil {
		return transport.InventoryResponse{}, &fsm.Error{Code: fsm.ErrNotFound.Code, Message: "node " + n.cfg.NodeID + " carries no devices"}
	}
	n.invServed.Add(1)
	n.invMu.Lock()
	inv := n.inv
	n.invMu.Unlock()
	inv.Token = n.cfg.ACLToken
	return inv, nil
}

// checkHostToken says whether the token a host sent may register it.
func (n *Node) checkHostToken(id, secret string) error {
	if secret == "" {
		return fmt.Errorf("%w: host %s sent no token (acl { token } in its config)", ErrHostToken, id)
	}
	var (
		tok fsm.ACLToken
		ok  bool
		may bool
	)
	hash := fsm.HashACLSecret(secret)
	n.fsm.Read(func(s *fsm.State) {
		if tok, ok = s.ACLTokenBySecretHash(hash); ok {
			may = s.Authorizer(tok).MayRegisterHost(id)
		}
	})
	switch {
	case !ok:
		return fmt.Errorf("%w: host %s sent an unknown token", ErrHostToken, id)
	case tok.ExpiresAt != 0 && tok.ExpiresAt <= time.Now().UnixNano():
		return fmt.Errorf("%w: host %s sent an expired token (accessor %s)", ErrHostToken, id, tok.AccessorID)
	case !may:
		return fmt.Errorf("%w: the token of host %s (accessor %s) may not register it", ErrHostToken, id, tok.AccessorID)
	}
	return nil
}
