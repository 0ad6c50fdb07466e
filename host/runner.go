// Package host reaches the servers of the fleet over SSH and runs the
// host-side steps (scripts/host/*.sh) on them. It owns connections, host-key
// checking, authentication and fan-out; it must not know about rounds,
// approvals or Kubernetes.
package host

import "context"

// Output is what one remote command left behind.
type Output struct {
	Stdout    []byte `json:"-"`
	Stderr    []byte `json:"-"`
	ExitCode  int    `json:"exit_code"`
	Truncated bool   `json:"truncated"` // stdout or stderr hit the size cap
}

// Runner runs a POSIX sh script on a named node. The script is sent on the
// remote `sh -s` standard input (through `sudo -n` when the login user is not
// root); env becomes `export NAME='value'` lines prepended to the script, so
// the values survive sudo's environment reset and are never interpreted by a
// shell. A non-zero exit is not an error: it is reported in Output.ExitCode.
// Errors are for what prevented the script from running or finishing
// (unknown node, host key refused, connection lost, context ended).
type Runner interface {
	RunScript(ctx context.Context, node string, script []byte, env map[string]string) (Output, error)
}
