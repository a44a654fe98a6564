package fsm

import (
	"fmt"
	"slices"
	"sync/atomic"
)

// Feature levels gate new command types during a rolling upgrade. A
// binary supports every command type up to its FeatureLevel; servers
// advertise it in gossip, and the leader proposes a command only when
// every server in the Raft configuration advertises at least the
// command's level (cluster/DESIGN.md, "Rolling upgrades"). Level 1 is
// the first release: command types 1–17, snapshot format 2 (format 1
// still restores) and RegisterHost's inventory hash. Level 2 (0.2.0)
// adds DrainHost, level 3 (0.3.0) SetQuota and SetQueueConfig, level 4 (0.4.0) gangs and topology (topologySince), level 5 (0.5.0) Batch. A release that adds a command
// type raises the level by one and lists the type below with the level
// and the first version that knows it. Levels only grow; a type never
// changes level.

// Since is when a command type appeared: the feature level that brought
// it and the first dmsc version that knows it.
type Since struct {
	Level   int
	Version string
}

// baseLevel is the level of this release without test knobs.
const baseLevel = 5

// commandSince is the table of every command type this binary knows.
var commandSince = map[CommandType]Since{
	RegisterHostType:     {1, "0.1.0"},
	RemoveHostType:       {1, "0.1.0"},
	SetHostStatusType:    {1, "0.1.0"},
	SetDeviceStatusType:  {1, "0.1.0"},
	AllocateType:         {1, "0.1.0"},
	ReleaseType:          {1, "0.1.0"},
	RenewType:            {1, "0.1.0"},
	CancelType:           {1, "0.1.0"},
	SetPolicyType:        {1, "0.1.0"},
	SetRetentionType:     {1, "0.1.0"},
	TickType:             {1, "0.1.0"},
	SetServerRemovedType: {1, "0.1.0"},
	ACLBootstrapType:     {1, "0.1.0"},
	ACLPolicyUpsertType:  {1, "0.1.0"},
	ACLPolicyDeleteType:  {1, "0.1.0"},
	ACLTokenUpsertType:   {1, "0.1.0"},
	ACLTokenDeleteType:   {1, "0.1.0"},
	DrainHostType:        {2, "0.2.0"},
	SetQuotaType:         {3, "0.3.0"},
	SetQueueConfigType:   {3, "0.3.0"},
	BatchType:            {5, "0.5.0"},
}

// levelVersions is the first version of each feature level, from 1.
var levelVersions = []string{"0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0"}

// topologySince is when an Allocate may carry a gang (max_hosts,
// min_per_host, same) or a claim's topology, and a RegisterHost devices'
// topology: a server before it would ignore those fields (place the
// request on one host, choose other devices), so such an entry needs
// level 4.
var topologySince = Since{Level: 4, Version: "0.4.0"}

// CommandNeeds says what a command needs of every server: its type's
// level (CommandSince), or more when its fields ask for a later feature
// (a gang, a topology). ok is false for a type this binary does not know.
func CommandNeeds(c Command) (Since, bool) {
	since, ok := CommandSince(c.Type())
	if !ok || since.Level >= topologySince.Level {
		return since, ok
	}
	later := false
	switch c := c.(type) {
	case *Allocate:
		r := &c.Request
		later = r.MaxHosts != 0 || r.MinPerHost != 0 || r.Same != "" || r.Host != "" ||
			slices.ContainsFunc(r.Claims, func(cl Claim) bool { return cl.Topology != "" })
	case *RegisterHost:
		later = slices.ContainsFunc(c.Devices, func(d DeviceSpec) bool { return d.Topology != nil })
	}
	if later {
		since = topologySince
	}
	return since, true
}

// TestNoopType is a command type known only to a binary started with the
// test knob (EnableTestNoop): it stands for the command type a future
// release adds, at the level above this one.
const TestNoopType CommandType = 250

// testNoopSince is the level and version the test command pretends to
// need.
var testNoopSince = Since{Level: baseLevel + 1, Version: "0.6.0"}

var testNoop atomic.Bool

// EnableTestNoop, for tests only, makes this binary know TestNoopType and
// support the level above its own, as the next release would. It is set
// once, at start, before any command is decoded.
func EnableTestNoop() { testNoop.Store(true) }

// TestNoopEnabled reports whether EnableTestNoop was called.
func TestNoopEnabled() bool { return testNoop.Load() }

// FeatureLevel is the highest feature level this binary supports.
func FeatureLevel() int {
	if testNoop.Load() {
		return testNoopSince.Level
	}
	return baseLevel
}

// CommandSince says when a command type this binary knows appeared; ok is
// false for a type it does not know.
func CommandSince(t CommandType) (Since, bool) {
	if t == TestNoopType {
		return testNoopSince, testNoop.Load()
	}
	s, ok := commandSince[t]
	return s, ok
}

// VersionOfLevel is the first dmsc version with a feature level, when
// this binary knows it ("" if not).
func VersionOfLevel(level int) string {
	if level == testNoopSince.Level && testNoop.Load() {
		return testNoopSince.Version
	}
	if level < 1 || level > len(levelVersions) {
		return ""
	}
	return levelVersions[level-1]
}

// TestNoop changes nothing. See EnableTestNoop.
type TestNoop struct {
	Meta
	Note string `json:"note,omitempty"`
}

func (*TestNoop) Type() CommandType { return TestNoopType }

// NeedsUpgradeError is a command this binary cannot decode because a
// newer dmsc wrote it. Level and Version are what the writer said the
// command needs (zero and "" when it did not say).
type NeedsUpgradeError struct {
	Type CommandType
	// Format, when not zero, is a log entry envelope format this binary
	// does not know (the type is then unknown too).
	Format  byte
	Level   int
	Version string
}

func (e *NeedsUpgradeError) Error() string {
	if e.Format != 0 {
		return fmt.Sprintf("entry format 0x%02x, which %s", e.Format, e.Needs())
	}
	return fmt.Sprintf("command type %d, which %s", e.Type, e.Needs())
}

// Needs says what the command needs: "needs dmsc >= 0.3.0 (feature level
// 3)", or less when the writer did not say.
func (e *NeedsUpgradeError) Needs() string {
	switch {
	case e.Version != "" && e.Level > 0:
		return fmt.Sprintf("needs dmsc >= %s (feature level %d)", e.Version, e.Level)
	case e.Level > 0:
		return fmt.Sprintf("needs feature level %d", e.Level)
	}
	return "needs a newer dmsc"
}

// Unwrap makes the error match ErrUnknownCommand.
func (e *NeedsUpgradeError) Unwrap() error { return ErrUnknownCommand }
