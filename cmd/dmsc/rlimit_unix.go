//go:build unix

package main

import (
	"syscall"

	"github.com/hashicorp/go-hclog"
)

// raiseFileLimit raises the soft limit of open files to the hard limit, so
// that many client connections do not run the agent out of descriptors
// before the connection limits act.
func raiseFileLimit(log hclog.Logger) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("cannot read the open-files limit", "error", err)
		return
	}
	if lim.Cur >= lim.Max {
		log.Debug("open-files limit", "limit", lim.Cur)
		return
	}
	old := lim.Cur
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("cannot raise the open-files limit", "soft", old, "hard", lim.Max, "error", err)
		return
	}
	log.Info("raised the open-files limit", "from", old, "to", lim.Max)
}
