//go:build !linux

package integration

import (
	"errors"
	"testing"
)

// partitioner is Linux-only (iptables); elsewhere the nemesis only kills
// and freezes.
type partitioner struct{}

func newPartitioner(testing.TB) (*partitioner, error) {
	return nil, errors.New("partitions need Linux iptables")
}

func (*partitioner) attach([]*Process)         {}
func (*partitioner) cut(a, b []*Process) error { return nil }
func (*partitioner) heal() error               { return nil }
