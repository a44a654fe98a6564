package fsm

import (
	"cmp"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestRankSetAgainstSortedList drives rankSets through random builds,
// inserts and removes (with many equal keys, and long runs at either end
// as the statistics' Seqs make) and compares every query with a sorted
// list after each step, through block splits, merges and emptied blocks.
func TestRankSetAgainstSortedList(t *testing.T) {
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 7))
		keys := []int{8, 200, 5000}[seed%3] // few keys: long runs of equal ones
		var r rankSet[seqVal]
		var ref []seqVal // sorted by seq; equal seqs in insertion order
		if seed%2 == 1 {
			n := rng.IntN(4 * rankBlock)
			for range n {
				ref = append(ref, item(uint64(rng.IntN(keys))))
			}
			slices.SortStableFunc(ref, func(a, b seqVal) int { return int(a.seq) - int(b.seq) })
			r.build(slices.Clone(ref))
		}
		for step := range 6000 {
			x := item(uint64(rng.IntN(keys)))
			switch op := rng.IntN(10); {
			case op < 5 || len(ref) == 0:
				if step%3 == 0 { // at the end, as new Seqs come
					x = item(uint64(keys))
					if len(ref) > 0 {
						x = item(max(x.seq, ref[len(ref)-1].seq))
					}
				}
				r.insert(x)
				i, _ := slices.BinarySearchFunc(ref, x.seq+1, func(a seqVal, k uint64) int { return cmp.Compare(a.seq, k) })
				ref = slices.Insert(ref, i, x)
			default:
				if op < 8 && len(ref) > 0 { // the oldest, as trim does
					x = ref[0]
				}
				i, found := slices.BinarySearchFunc(ref, x.seq, func(a seqVal, k uint64) int { return cmp.Compare(a.seq, k) })
				if got := r.remove(x); got != found {
					t.Fatalf("seed %d step %d: remove(%d) = %v, want %v", seed, step, x.seq, got, found)
				}
				if found {
					ref = slices.Delete(ref, i, i+1)
				}
			}
			checkRankSet(t, &r, ref, uint64(keys)+2)
		}
	}
}

// item is the item of key k: items of one key weigh alike, as an
// ostTree's (the value is the key) and unlike a seqTree's (one item a
// key), so that which of equal items a remove takes does not matter.
func item(k uint64) seqVal { return seqVal{seq: k, v: k*k*31 + 7} }

// checkRankSet compares every query of r with the sorted list ref.
func checkRankSet(t *testing.T, r *rankSet[seqVal], ref []seqVal, keys uint64) {
	t.Helper()
	if r.len() != len(ref) {
		t.Fatalf("len %d, want %d", r.len(), len(ref))
	}
	var all u128
	for _, x := range ref {
		all.add(x.v)
	}
	if r.all != all {
		t.Fatalf("sum %v, want %v", r.all, all)
	}
	if len(ref) > 0 && (r.first().seq != ref[0].seq || r.last().seq != ref[len(ref)-1].seq) {
		t.Fatalf("first/last %d/%d, want %d/%d", r.first().seq, r.last().seq, ref[0].seq, ref[len(ref)-1].seq)
	}
	for i, b := range r.blocks {
		if len(b) == 0 || len(b) > 2*rankBlock {
			t.Fatalf("a block of %d items", len(b))
		}
		if r.bsum[i] != sumOf(b) {
			t.Fatalf("block %d sums to %v, kept as %v", i, sumOf(b), r.bsum[i])
		}
	}
	// Prefix sums of ref; every key when there are few, else a stride.
	sums := make([]u128, len(ref)+1)
	for i, y := range ref {
		sums[i+1] = sums[i]
		sums[i+1].add(y.v)
	}
	step := max(keys/97, 1)
	for k := uint64(0); k < keys; k += step {
		x := seqVal{seq: k}
		before, _ := slices.BinarySearchFunc(ref, k, func(a seqVal, k uint64) int { return cmp.Compare(a.seq, k) })
		upTo, _ := slices.BinarySearchFunc(ref, k+1, func(a seqVal, k uint64) int { return cmp.Compare(a.seq, k) })
		if got := r.countBefore(x); got != before {
			t.Fatalf("countBefore(%d) = %d, want %d", k, got, before)
		}
		if got := r.countUpTo(x); got != upTo {
			t.Fatalf("countUpTo(%d) = %d, want %d", k, got, upTo)
		}
		if n, s := r.sumUpTo(x); n != upTo || s != sums[upTo] {
			t.Fatalf("sumUpTo(%d) = %d %v, want %d %v", k, n, s, upTo, sums[upTo])
		}
	}
}
