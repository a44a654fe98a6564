//go:build !linux

package main

import "syscall"

// childProcAttr: only Linux can tie the command's life to dmsc run's.
func childProcAttr() *syscall.SysProcAttr { return nil }
