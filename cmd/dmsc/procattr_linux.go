package main

import "syscall"

// childProcAttr has the kernel send a child SIGTERM when dmsc dies: the
// command of dmsc run, so that a killed dmsc run does not leave it on
// devices that are no longer its, and the agents of dmsc bench -spawn.
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
}
