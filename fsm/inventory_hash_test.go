package fsm

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestInventoryHashIsStored: the host record keeps the hash its last
// RegisterHost carried, a snapshot carries it, and a registration without
// one (the API's) clears it.
func TestInventoryHashIsStored(t *testing.T) {
	h := newHarness(t)
	dev := DeviceSpec{ID: "g1", Type: GPU}
	h.must(&RegisterHost{Host: HostSpec{ID: "h1", Address: "10.0.0.1:4647"}, Devices: []DeviceSpec{dev}, InventoryHash: "abc123"})
	if got, _ := h.s.Host("h1"); got.InventoryHash != "abc123" {
		t.Fatalf("hash %q", got.InventoryHash)
	}
	b := h.s.SnapshotBytes()
	back, err := Restore(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := back.Host("h1"); got.InventoryHash != "abc123" {
		t.Fatalf("restored hash %q", got.InventoryHash)
	}
	if !bytes.Equal(back.SnapshotBytes(), b) {
		t.Fatal("snapshot of the restored state differs")
	}

	h.must(&RegisterHost{Host: HostSpec{ID: "h1"}, Devices: []DeviceSpec{dev}})
	if got, _ := h.s.Host("h1"); got.InventoryHash != "" {
		t.Fatalf("hash %q after a registration without one", got.InventoryHash)
	}

	r := h.apply(&RegisterHost{Host: HostSpec{ID: "h2"}, InventoryHash: strings.Repeat("a", MaxInventoryHashLength+1)})
	if !errors.Is(r.Err, ErrInvalid) {
		t.Fatalf("overlong hash: %v", r.Err)
	}
}
