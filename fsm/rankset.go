package fsm

import (
	"slices"
	"sort"
)

// rankSet is an ordered multiset with rank queries and exact sums: the
// order-statistic structure behind the statistics' durations and waits
// (stats_agg.go). Its items lie sorted in blocks of up to 2·rankBlock
// items, every item of a block at or before every item of the next, and
// a Fenwick tree over the blocks counts and sums them. So it holds no
// pointer per item (the garbage collector scans a few thousand slice
// headers for a million items, not a million nodes), a restore builds it
// by cutting one sorted slice into blocks (build), and an insert or a
// remove moves at most a block's items and updates O(log blocks) sums;
// a block that splits, empties or merges rebuilds the tree, O(blocks),
// once every rankBlock or so changes to it.
type rankSet[T rankItem[T]] struct {
	blocks [][]T
	// bsum is the sum of each block.
	bsum []u128
	// cnt and sum are the Fenwick trees of the blocks' lengths and
	// sums: cnt[i] covers the blocks (i+1)&i to i, 1-based.
	cnt []int
	sum []u128
	n   int
	all u128
}

// rankItem is what a rankSet holds: an item ordered by its key (before
// is strictly less; items neither before the other have the same key),
// with a non-negative weight that the sums add.
type rankItem[T any] interface {
	before(T) bool
	weight() uint64
}

// rankBlock is half the most items a block holds; blocks that build
// makes hold this many.
const rankBlock = 512

// build fills the (empty) set with items, sorted, which it keeps.
func (r *rankSet[T]) build(items []T) {
	for len(items) > 0 {
		k := min(len(items), rankBlock)
		r.blocks = append(r.blocks, items[:k:k])
		r.bsum = append(r.bsum, sumOf(items[:k]))
		items = items[k:]
	}
	r.rebuild()
}

// sumOf is the sum of the items' weights.
func sumOf[T rankItem[T]](items []T) u128 {
	var s u128
	for _, x := range items {
		s.add(x.weight())
	}
	return s
}

// rebuild recomputes the Fenwick trees and totals from the blocks and
// their sums.
func (r *rankSet[T]) rebuild() {
	nb := len(r.blocks)
	r.cnt = slices.Grow(r.cnt[:0], nb+1)[:nb+1]
	r.sum = slices.Grow(r.sum[:0], nb+1)[:nb+1]
	clear(r.cnt)
	clear(r.sum)
	r.n, r.all = 0, u128{}
	for i, b := range r.blocks {
		s := r.bsum[i]
		r.n += len(b)
		r.all = r.all.plus(s)
		r.cnt[i+1] += len(b)
		r.sum[i+1] = r.sum[i+1].plus(s)
		if j := (i + 1) + (i+1)&-(i+1); j <= nb {
			r.cnt[j] += r.cnt[i+1]
			r.sum[j] = r.sum[j].plus(r.sum[i+1])
		}
	}
}

// update adds one item of weight w to block i (sign 1) or takes it away
// (-1), in the trees and totals.
func (r *rankSet[T]) update(i, sign int, w uint64) {
	r.n += sign
	if sign > 0 {
		r.all.add(w)
		r.bsum[i].add(w)
	} else {
		r.all.sub(w)
		r.bsum[i].sub(w)
	}
	for j := i + 1; j < len(r.cnt); j += j & -j {
		r.cnt[j] += sign
		if sign > 0 {
			r.sum[j].add(w)
		} else {
			r.sum[j].sub(w)
		}
	}
}

// prefix is the count and sum of the items of blocks[:i].
func (r *rankSet[T]) prefix(i int) (int, u128) {
	n, s := 0, u128{}
	for ; i > 0; i -= i & -i {
		n += r.cnt[i]
		s = s.plus(r.sum[i])
	}
	return n, s
}

// blockAfter is the first block whose first item is after x, and
// blockFrom the first whose first item is not before x (len(blocks) when
// there is none).
func (r *rankSet[T]) blockAfter(x T) int {
	return sort.Search(len(r.blocks), func(i int) bool { return x.before(r.blocks[i][0]) })
}

func (r *rankSet[T]) blockFrom(x T) int {
	return sort.Search(len(r.blocks), func(i int) bool { return !r.blocks[i][0].before(x) })
}

// upper is the index in b of the first item after x, and lower that of
// the first item not before x.
func upper[T rankItem[T]](b []T, x T) int {
	return sort.Search(len(b), func(i int) bool { return x.before(b[i]) })
}

func lower[T rankItem[T]](b []T, x T) int {
	return sort.Search(len(b), func(i int) bool { return !b[i].before(x) })
}

func (r *rankSet[T]) len() int { return r.n }

// insert adds x after the items of its key.
func (r *rankSet[T]) insert(x T) {
	if len(r.blocks) == 0 {
		r.blocks = append(r.blocks, []T{x})
		r.bsum = append(r.bsum, sumOf([]T{x}))
		r.rebuild()
		return
	}
	i := max(r.blockAfter(x)-1, 0)
	b := r.blocks[i]
	r.blocks[i] = slices.Insert(b, upper(b, x), x)
	if len(r.blocks[i]) <= 2*rankBlock {
		r.update(i, 1, x.weight())
		return
	}
	// Both halves get arrays of their size: the full one, grown by
	// append, has room for a quarter to twice as many items again.
	full := r.blocks[i]
	tail := slices.Clone(full[rankBlock:])
	r.blocks[i] = slices.Clone(full[:rankBlock])
	r.blocks = slices.Insert(r.blocks, i+1, tail)
	r.bsum[i] = sumOf(r.blocks[i])
	r.bsum = slices.Insert(r.bsum, i+1, sumOf(tail))
	r.rebuild()
}

// remove takes away one item of x's key and reports whether there was
// one.
func (r *rankSet[T]) remove(x T) bool {
	// Only the last block that starts at or before x can hold it: an
	// earlier one ends at or before that block's first item, which is
	// either x's key or before it.
	i := r.blockAfter(x) - 1
	if i < 0 {
		return false
	}
	b := r.blocks[i]
	j := lower(b, x)
	if j == len(b) || x.before(b[j]) {
		return false
	}
	w := b[j].weight()
	r.blocks[i] = slices.Delete(b, j, j+1)
	switch {
	case len(r.blocks[i]) == 0:
		r.blocks = slices.Delete(r.blocks, i, i+1)
		r.bsum = slices.Delete(r.bsum, i, i+1)
	case i+1 < len(r.blocks) && len(r.blocks[i])+len(r.blocks[i+1]) <= rankBlock:
		r.blocks[i] = append(r.blocks[i], r.blocks[i+1]...)
		r.blocks = slices.Delete(r.blocks, i+1, i+2)
		r.bsum[i].sub(w)
		r.bsum[i] = r.bsum[i].plus(r.bsum[i+1])
		r.bsum = slices.Delete(r.bsum, i+1, i+2)
	default:
		r.update(i, -1, w)
		return true
	}
	r.rebuild()
	return true
}

// countBefore is how many items are before x.
func (r *rankSet[T]) countBefore(x T) int {
	// Blocks before i end at or before block i's first item, which is
	// before x; blocks from i+1 on start at or after x.
	i := r.blockFrom(x) - 1
	if i < 0 {
		return 0
	}
	n, _ := r.prefix(i)
	return n + lower(r.blocks[i], x)
}

// countUpTo is how many items are before x or of its key, and sumUpTo
// that count and the items' sum.
func (r *rankSet[T]) countUpTo(x T) int {
	i, k := r.upTo(x)
	if i < 0 {
		return 0
	}
	n, _ := r.prefix(i)
	return n + k
}

func (r *rankSet[T]) sumUpTo(x T) (int, u128) {
	i, k := r.upTo(x)
	if i < 0 {
		return 0, u128{}
	}
	n, s := r.prefix(i)
	for _, y := range r.blocks[i][:k] {
		s.add(y.weight())
	}
	return n + k, s
}

// upTo is where the items after x start: at item k of block i, every
// block before i holding none of them (i is -1 when every item is after
// x). Blocks before i end at or before block i's first item, which is
// not after x; blocks from i+1 on start after x.
func (r *rankSet[T]) upTo(x T) (i, k int) {
	i = r.blockAfter(x) - 1
	if i < 0 {
		return -1, 0
	}
	return i, upper(r.blocks[i], x)
}

// first and last are the least and the greatest item; the set must not
// be empty.
func (r *rankSet[T]) first() T { return r.blocks[0][0] }
func (r *rankSet[T]) last() T {
	b := r.blocks[len(r.blocks)-1]
	return b[len(b)-1]
}
