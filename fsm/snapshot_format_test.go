package fsm_test

import (
	"bytes"
	"errors"
	"math/rand"
	"testing"
	"time"

	"github.com/dmsc/dmsc/fsm"
)

// randomState applies a random log of n commands.
func randomState(seed int64, n int) *fsm.State {
	g := newCmdGen(rand.New(rand.NewSource(seed)))
	s := fsm.New()
	v := observe(s)
	for i := 1; i <= n; i++ {
		st := g.next(s, v)
		res := s.Apply(uint64(i), st.cmd)
		g.learn(&st, uint64(i), res, s)
		v = observe(s)
	}
	return s
}

// TestSnapshotFormats: a snapshot starts with its format byte; a state
// restored from format 1 (older builds) or format 2 writes the same
// format 2 bytes as the state it came from; every truncation and every
// byte flip of a format 2 snapshot is refused with ErrSnapshot or
// restores to a state that holds together.
func TestSnapshotFormats(t *testing.T) {
	for seed := int64(1); seed <= 4; seed++ {
		s := randomState(seed, 400)
		snap := s.SnapshotBytes()
		if snap[0] != fsm.SnapshotVersion {
			t.Fatalf("snapshot starts with %#x, want the format byte %d", snap[0], fsm.SnapshotVersion)
		}
		for name, in := range map[string][]byte{"format 1": fsm.SnapshotV1Bytes(s), "format 2": snap} {
			r, err := fsm.Restore(bytes.NewReader(in))
			if err != nil {
				t.Fatalf("seed %d: restore of %s: %v", seed, name, err)
			}
			if !bytes.Equal(r.SnapshotBytes(), snap) {
				t.Fatalf("seed %d: the state restored from %s writes other bytes", seed, name)
			}
		}
		for n := 0; n < len(snap); n += 1 + n/16 {
			if _, err := fsm.Restore(bytes.NewReader(snap[:n])); !errors.Is(err, fsm.ErrSnapshot) {
				t.Fatalf("seed %d: snapshot cut at %d of %d bytes: %v, want ErrSnapshot", seed, n, len(snap), err)
			}
		}
		if _, err := fsm.Restore(bytes.NewReader(append(snap, 0))); !errors.Is(err, fsm.ErrSnapshot) {
			t.Fatalf("seed %d: a byte after the history: %v, want ErrSnapshot", seed, err)
		}
		rng := rand.New(rand.NewSource(seed))
		for range 200 {
			bad := bytes.Clone(snap)
			bad[1+rng.Intn(len(bad)-1)] ^= byte(1 + rng.Intn(255))
			r, err := fsm.Restore(bytes.NewReader(bad))
			if err != nil {
				if !errors.Is(err, fsm.ErrSnapshot) {
					t.Fatalf("seed %d: %v is not ErrSnapshot", seed, err)
				}
				continue
			}
			if err := r.CheckInvariants(); err != nil {
				t.Fatalf("seed %d: a flipped byte restored to a state that does not hold: %v", seed, err)
			}
		}
	}
}

// TestStateDigest: the digest follows the state (the same commands give
// the same digest; another command changes it), and a restored state,
// whose history was rebuilt from the snapshot, has its original's.
func TestStateDigest(t *testing.T) {
	digest := func(s *fsm.State) []byte {
		var b bytes.Buffer
		if err := s.WriteDigest(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	a, b := randomState(7, 300), randomState(7, 300)
	if !bytes.Equal(digest(a), digest(b)) {
		t.Fatal("two states of the same log have different digests")
	}
	if a.HistoryLen() == 0 {
		t.Fatal("the log left no history: the test checks nothing")
	}
	r, err := fsm.Restore(bytes.NewReader(a.SnapshotBytes()))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(digest(r), digest(a)) {
		t.Fatal("a restored state has another digest")
	}
	// One more command, one the state surely accepts (a random one may
	// be refused, and a refusal changes nothing).
	c := randomState(7, 300)
	if res := c.Apply(301, fsm.Stamp(&fsm.Tick{}, c.Now().Add(time.Second))); res.Err != nil {
		t.Fatal(res.Err)
	}
	if bytes.Equal(digest(c), digest(a)) {
		t.Fatal("one more command left the digest as it was")
	}
	if c := randomState(8, 300); bytes.Equal(digest(c), digest(a)) {
		t.Fatal("another log gave the same digest")
	}
	// Two ticks that change nothing, with other request IDs: the states
	// differ only in what the request cache remembers.
	d, e := randomState(7, 300), randomState(7, 300)
	for s, id := range map[*fsm.State]string{d: "digest-probe-1", e: "digest-probe-2"} {
		tick := fsm.Stamp(&fsm.Tick{}, s.Now())
		fsm.SetRequestID(tick, id)
		if res := s.Apply(301, tick); res.Err != nil {
			t.Fatal(res.Err)
		}
	}
	if bytes.Equal(digest(d), digest(e)) {
		t.Fatal("other requests in the request cache left the digest as it was")
	}
	if err := d.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
}
