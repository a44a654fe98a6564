package cluster

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/fsm"
)

// Rolling upgrades (DESIGN.md, "Rolling upgrades"). Every server
// advertises its dmsc version and its feature level (fsm.FeatureLevel) in
// gossip. A command type above level 1 is proposed only when every server
// of the Raft configuration, voter or not, advertises its level: checked
// by the node that takes the write (before forwarding it) and, for good,
// by the leader right before it proposes. A server that advertises no
// level (a release before levels) counts as level 1; one gossip does not
// show counts as too old, since nothing vouches for it.

// Test knobs, read once at start (New). They stand for a newer release in
// a mixed-version test and must not be set in production.
const (
	// TestExtraCommandEnv=1 makes this binary know fsm.TestNoopType and
	// advertise the feature level above its own (fsm.EnableTestNoop).
	TestExtraCommandEnv = "DMSC_TEST_EXTRA_COMMAND"
	// TestSkipFeatureGateEnv=1 makes this server propose commands of any
	// level without checking the other servers (a bypassed gate).
	TestSkipFeatureGateEnv = "DMSC_TEST_SKIP_FEATURE_GATE"
)

// readUpgradeTestKnobs applies the test knobs of the environment.
func (n *Node) readUpgradeTestKnobs() {
	if os.Getenv(TestExtraCommandEnv) == "1" {
		fsm.EnableTestNoop()
		n.log.Warn("test knob: this binary knows one more command type", "type", int(fsm.TestNoopType), "feature_level", fsm.FeatureLevel())
	}
	if os.Getenv(TestSkipFeatureGateEnv) == "1" {
		n.skipFeatureGate = true
		n.log.Warn("test knob: the feature gate is off on this server")
	}
}

// serverLevel is a server's feature level as it advertises it.
type serverLevel struct {
	ID      string
	Version string
	Level   int
	Known   bool // gossip shows it
}

// featureGate refuses a command (what) of level since.Level unless every
// server in servers supports it; the error names those that do not.
func featureGate(what string, since fsm.Since, servers []serverLevel) error {
	if since.Level <= 1 {
		return nil
	}
	var old []string
	for _, s := range servers {
		switch {
		case !s.Known:
			old = append(old, s.ID+" (not seen in gossip)")
		case s.Level < since.Level:
			v := s.Version
			if v == "" {
				v = "unknown version"
			}
			old = append(old, fmt.Sprintf("%s (dmsc %s, feature level %d)", s.ID, v, s.Level))
		}
	}
	if len(old) == 0 {
		return nil
	}
	sort.Strings(old)
	return clusterErr(ErrFeatureUnavailable, fmt.Sprintf("%s needs dmsc >= %s (feature level %d) on every server; too old: %s; upgrade them first",
		what, since.Version, since.Level, strings.Join(old, ", ")))
}

// checkFeature applies the gate to cmd with this server's view of the
// Raft configuration and of gossip. Hosts do not check (the leader does).
func (n *Node) checkFeature(ctx context.Context, cmd fsm.Command) error {
	if n.raft == nil || n.skipFeatureGate {
		return nil
	}
	since, ok := fsm.CommandNeeds(cmd)
	if !ok {
		return &fsm.NeedsUpgradeError{Type: cmd.Type()}
	}
	if since.Level <= 1 {
		return nil
	}
	cfg, _, err := n.configuration(ctx)
	if err != nil {
		return err
	}
	what := fmt.Sprintf("command type %d", cmd.Type())
	if typeSince, _ := fsm.CommandSince(cmd.Type()); typeSince != since {
		what = fmt.Sprintf("command type %d with a gang or a topology", cmd.Type())
	}
	return featureGate(what, since, n.serverLevels(cfg))
}

// serverLevels is what the servers of cfg advertise.
func (n *Node) serverLevels(cfg raft.Configuration) []serverLevel {
	out := make([]serverLevel, 0, len(cfg.Servers))
	for _, s := range cfg.Servers {
		id := string(s.ID)
		if id == n.cfg.NodeID {
			out = append(out, serverLevel{ID: id, Version: n.cfg.Version, Level: fsm.FeatureLevel(), Known: true})
			continue
		}
		m, ok := n.members.get(id)
		out = append(out, serverLevel{ID: id, Version: m.meta.Version, Level: m.meta.level(), Known: ok && m.meta.server()})
	}
	return out
}

// level is the advertised feature level; a server of a release before
// levels advertises none and is level 1.
func (m nodeMeta) level() int { return max(m.Level, 1) }
