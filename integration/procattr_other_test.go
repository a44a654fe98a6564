//go:build !linux

package integration

import "syscall"

// childProcAttr has nothing to add where the kernel cannot tie a child's
// life to its parent's; t.Cleanup still kills every child.
func childProcAttr() *syscall.SysProcAttr { return nil }
