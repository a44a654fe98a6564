// Package bench is the engine of `dmsc bench`: it registers a synthetic
// inventory on a cluster (`dmsc bench -local` starts one in this process
// with cluster.StartLocal), drives it with concurrent clients doing a
// weighted mix of operations for a while, and summarises throughput,
// latency percentiles and errors by code.
package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// Op is one kind of operation a bench client performs.
type Op int

// The operations. Alloc is an allocate of one GPU followed by its release,
// timed and counted as one operation; Alloc4 and Alloc8 the same with four
// and eight GPUs of one host; Read reads an allocation or a host's device
// list; Renew renews the lease of an allocation the client holds.
const (
	OpAlloc Op = iota
	OpAlloc4
	OpAlloc8
	OpRead
	OpRenew
	numOps
)

var opNames = [numOps]string{"alloc", "alloc4", "alloc8", "read", "renew"}

func (o Op) String() string {
	if o < 0 || o >= numOps {
		return "op(" + strconv.Itoa(int(o)) + ")"
	}
	return opNames[o]
}

// Mix is the weight of each operation: an operation is drawn with
// probability weight/total.
type Mix [numOps]int

// DefaultMix is mostly allocate+release, some reads and a few renewals.
var DefaultMix = Mix{OpAlloc: 80, OpRead: 15, OpRenew: 5}

// ParseMix reads "alloc=80,read=15,renew=5". Operations left out weigh 0;
// weights are non-negative integers and at least one is positive.
func ParseMix(s string) (Mix, error) {
	var m Mix
	seen := [numOps]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, val, ok := strings.Cut(part, "=")
		if !ok {
			return Mix{}, fmt.Errorf("mix: want op=weight, got %q", part)
		}
		op, ok := opByName(strings.TrimSpace(name))
		if !ok {
			return Mix{}, fmt.Errorf("mix: unknown operation %q (want alloc, alloc4, alloc8, read or renew)", name)
		}
		if seen[op] {
			return Mix{}, fmt.Errorf("mix: %s given twice", op)
		}
		seen[op] = true
		w, err := strconv.Atoi(strings.TrimSpace(val))
		if err != nil || w < 0 {
			return Mix{}, fmt.Errorf("mix: weight of %s must be a non-negative integer, got %q", op, val)
		}
		m[op] = w
	}
	if m.total() == 0 {
		return Mix{}, fmt.Errorf("mix: %q gives no operation a positive weight", s)
	}
	return m, nil
}

func opByName(name string) (Op, bool) {
	for i, n := range opNames {
		if strings.EqualFold(n, name) {
			return Op(i), true
		}
	}
	return 0, false
}

// String writes the mix as ParseMix reads it, without the operations of
// weight 0.
func (m Mix) String() string {
	parts := make([]string, 0, numOps)
	for op, w := range m {
		if w > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", Op(op), w))
		}
	}
	return strings.Join(parts, ",")
}

func (m Mix) total() int {
	t := 0
	for _, w := range m {
		t += w
	}
	return t
}

// pick maps r, uniform in [0, total), to an operation.
func (m Mix) pick(r int) Op {
	for op, w := range m {
		if r < w {
			return Op(op)
		}
		r -= w
	}
	return OpAlloc
}

// needsHeld reports whether the mix has operations on a held allocation.
func (m Mix) needsHeld() bool { return m[OpRead] > 0 || m[OpRenew] > 0 }
