package cluster

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/dmsc/dmsc/fsm"
)

func TestFeatureGate(t *testing.T) {
	base := fsm.Since{Level: 1, Version: "0.1.0"}
	next := fsm.Since{Level: 2, Version: "0.2.0"}
	servers := []serverLevel{
		{ID: "s1", Version: "0.2.0", Level: 2, Known: true},
		{ID: "s2", Version: "0.1.0", Level: 1, Known: true},
		{ID: "s3", Known: false},
	}
	if err := featureGate("command type 5", base, servers); err != nil {
		t.Fatalf("a level-1 command was gated: %v", err)
	}
	err := featureGate("command type 250", next, servers)
	if !errors.Is(err, ErrFeatureUnavailable) {
		t.Fatalf("gate: %v, want ErrFeatureUnavailable", err)
	}
	for _, want := range []string{"command type 250", "dmsc >= 0.2.0", "feature level 2", "s2 (dmsc 0.1.0, feature level 1)", "s3 (not seen in gossip)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("gate error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "s1") {
		t.Errorf("gate error %q names s1, which supports the command", err)
	}
	if IsRetryable(err) {
		t.Error("feature_unavailable is retryable")
	}
	if err := featureGate("command type 250", next, servers[:1]); err != nil {
		t.Fatalf("gate with every server at level 2: %v", err)
	}
}

// newerEntry is a log entry of a command type this binary does not know,
// as a leader of a newer dmsc writes it.
func newerEntry() []byte {
	return wrapLogEntryLevel(append([]byte{byte(fsm.TestNoopType)}, `{"time":1}`...), fsm.Since{Level: 6, Version: "0.6.0"})
}

func TestLogEntryOfANewerVersion(t *testing.T) {
	if fsm.TestNoopEnabled() {
		t.Skip("the test command is enabled in this process")
	}
	_, err := DecodeLogEntry(newerEntry())
	var nu *fsm.NeedsUpgradeError
	if !errors.As(err, &nu) || nu.Type != fsm.TestNoopType || nu.Level != 6 || nu.Version != "0.6.0" {
		t.Fatalf("decode: %v (%+v)", err, nu)
	}
	if !errors.Is(err, fsm.ErrUnknownCommand) || errors.Is(err, ErrCorruptEntry) {
		t.Fatalf("decode: %v should be an unknown command, not a corrupt entry", err)
	}

	// An envelope of a later format whose checksum holds.
	later := []byte{0xC5, 1, 2, 3}
	later = binary.BigEndian.AppendUint32(later, crc32.Checksum(later, castagnoli))
	if _, err := DecodeLogEntry(later); !errors.As(err, &nu) || nu.Format != 0xC5 {
		t.Fatalf("later format: %v", err)
	}
	// A damaged one is still corrupt.
	later[1] ^= 0xFF
	if _, err := DecodeLogEntry(later); !errors.Is(err, ErrCorruptEntry) {
		t.Fatalf("damaged later format: %v, want ErrCorruptEntry", err)
	}

	f := NewRaftFSM(fsm.New())
	f.version = "0.5.0"
	ok, _ := EncodeLogEntry(&fsm.Tick{})
	f.ApplyBatch([]*raft.Log{
		{Index: 1, Type: raft.LogCommand, Data: ok},
		{Index: 2, Type: raft.LogCommand, Data: newerEntry()},
	})
	h := f.Halt()
	if h == nil || h.Index != 2 || h.NeedsUpgrade() == nil {
		t.Fatalf("halt: %v", h)
	}
	want := "log entry 2 has command type 250, which needs dmsc >= 0.6.0 (feature level 6); this server runs dmsc 0.5.0 (feature level 5): upgrade this server"
	if h.Error() != want {
		t.Fatalf("halt message\n got: %s\nwant: %s", h.Error(), want)
	}
	if applied, _ := f.Indexes(); applied != 1 {
		t.Fatalf("applied %d, want 1", applied)
	}
}

func TestLevelOneEntriesKeepFormat1(t *testing.T) {
	b, err := EncodeLogEntry(&fsm.Allocate{})
	if err != nil || b[0] != entryFormat1 {
		t.Fatalf("allocate entry starts with 0x%02x (%v), want format 1", b[0], err)
	}
}

// TestGangNeedsLevel4: an Allocate with gang fields needs feature level 4
// (a server before it would place the request on one host): its entry
// carries the level, and it decodes to the same command.
func TestGangNeedsLevel4(t *testing.T) {
	one := &fsm.Allocate{Request: fsm.Request{Claims: []fsm.Claim{{Type: fsm.GPU, Count: 16}}}}
	gang := &fsm.Allocate{Request: fsm.Request{Claims: []fsm.Claim{{Type: fsm.GPU, Count: 16}}, MaxHosts: 2}}
	if s, _ := fsm.CommandNeeds(one); s.Level != 1 {
		t.Fatalf("a one-host Allocate needs level %d", s.Level)
	}
	s, _ := fsm.CommandNeeds(gang)
	if s.Level != 4 || s.Version != "0.4.0" {
		t.Fatalf("a gang needs %+v, want level 4 (0.4.0)", s)
	}
	b, err := EncodeLogEntry(gang)
	if err != nil || b[0] != entryFormat2 || b[1] != 4 {
		t.Fatalf("gang entry %x (%v): want format 2 at level 4", b[:min(len(b), 4)], err)
	}
	c, err := DecodeLogEntry(b)
	if a, ok := c.(*fsm.Allocate); err != nil || !ok || a.Request.MaxHosts != 2 {
		t.Fatalf("decode: %+v, %v", c, err)
	}
	servers := []serverLevel{{ID: "s1", Version: "0.4.0", Level: 4, Known: true}, {ID: "s2", Version: "0.3.0", Level: 3, Known: true}}
	if err := featureGate("a gang", s, servers); !errors.Is(err, ErrFeatureUnavailable) || !strings.Contains(err.Error(), "s2 (dmsc 0.3.0, feature level 3)") {
		t.Fatalf("gate with a level-3 server: %v", err)
	}
}

// TestStripTopology: registering a host while an older server remains
// strips its devices' topology on copies of them, and says whether any
// had one.
func TestStripTopology(t *testing.T) {
	numa := 0
	orig := []fsm.DeviceSpec{{ID: "g1", Type: fsm.GPU, Topology: &fsm.Topology{NUMA: &numa}}, {ID: "c1", Type: fsm.CPU}}
	cmd := &fsm.RegisterHost{Host: fsm.HostSpec{ID: "h1"}, Devices: orig}
	if !stripTopology(cmd) {
		t.Fatal("a device with a topology was not seen")
	}
	if cmd.Devices[0].Topology != nil || orig[0].Topology == nil {
		t.Fatalf("stripped %+v, original %+v", cmd.Devices[0], orig[0])
	}
	if s, _ := fsm.CommandNeeds(cmd); s.Level != 1 || stripTopology(cmd) {
		t.Fatalf("after stripping: level %d", s.Level)
	}
}
