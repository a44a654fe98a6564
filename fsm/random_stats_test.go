package fsm_test

import (
	"math/rand"
	"testing"

	"github.com/dmsc/dmsc/fsm"
)

// TestRandomLogStatsEveryCommand applies a random log of every kind of
// command and, after every one of them, compares every figure the
// statistics and recommendations keep as commands apply (all filters,
// device figures, fragmentation and host spread of every scope,
// recommendations) with a recomputation from scratch. TestRandomLog runs
// a longer log and checks a rotating part of them after each command.
func TestRandomLogStatsEveryCommand(t *testing.T) {
	seed := logSeed(t) + 1
	t.Logf("seed %d (rerun with -seed %d or DMSC_SEED=%d)", seed, seed-1, seed-1)
	n := 800
	if testing.Short() {
		n = 200
	}
	rng := rand.New(rand.NewSource(seed))
	g := newCmdGen(rng)
	s := fsm.New()
	view := observe(s)
	for i := 0; i < n; i++ {
		idx := uint64(i + 1)
		st := g.next(s, view)
		res := s.Apply(idx, st.cmd)
		if err := fsm.CheckStatsAgainstScratch(s, -1); err != nil {
			t.Fatalf("seed %d, command %d (%s): %v", seed, i+1, st.kind, err)
		}
		g.learn(&st, idx, res, s)
		view = observe(s)
	}
}
