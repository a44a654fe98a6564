package integration

import "syscall"

// childProcAttr makes the kernel kill a child when the test process dies
// (a test binary killed by -timeout leaves no agents behind).
func childProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
