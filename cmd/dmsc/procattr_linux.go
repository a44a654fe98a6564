package main

import "syscall"

// childProcAttr has the kernel send the command SIGTERM when dmsc run
// dies, so that a killed dmsc run does not leave it on devices that are
// no longer its.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
