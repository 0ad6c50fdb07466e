//go:build !linux

package cluster

import "syscall"

// childAttributes puts a component in its own process group, so stop can
// signal everything it forked.
func childAttributes() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
