package cluster

import "syscall"

// childAttributes puts a component in its own process group, so stop can
// signal everything it forked, and asks the kernel to kill it if the process
// that started it dies first (a crashed test must not leave an API server
// behind).
func childAttributes() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
