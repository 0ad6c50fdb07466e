package steps

import (
	"errors"
	"fmt"
	"strings"

	"github.com/mcp-patch/mcp-patch/host"
)

// Cause is why a host step stopped or a survey found a blocker: each
// has its own next step, for a person to take on that host.
type Cause string

// The causes a host step tells apart.
const (
	CauseUnreachable     Cause = "unreachable"
	CauseNoKey           Cause = "no_ssh_key"
	CauseHostKey         Cause = "host_key_changed"
	CauseSudo            Cause = "no_sudo"
	CauseDpkgInterrupted Cause = "dpkg_interrupted"
	CauseDpkgLocked      Cause = "dpkg_locked"
	CauseDpkgAudit       Cause = "dpkg_audit"
	CauseBootShort       Cause = "boot_short"
	CauseRemoval         Cause = "removal"
	CausePackages        Cause = "packages" // holds, held or Kubernetes packages moving
	CauseBoot            Cause = "boot_loader"
	CauseNvidia          Cause = "nvidia_modules"
	CauseOther           Cause = "other"
)

// NextStepFor is the next step for a cause on node, in a person's words.
// Pure: the table TestNextStepForEachCause holds it to.
func NextStepFor(c Cause, node string) string {
	switch c {
	case CauseUnreachable:
		return "Check that " + node + " is reachable over SSH (its address and port in the inventory, sshd running, the network and any jump host) and read the reason; then call again."
	case CauseNoKey:
		return "Give mcp-patch an SSH key for " + node + " (the reasons name the identity files tried): a key file at ~/.ssh/id_ed25519, id_ecdsa or id_rsa of the user it runs as, a key loaded into ssh-agent (ssh-add, with SSH_AUTH_SOCK set for mcp-patch), or one named in ssh.key_files, the inventory's identity_files or an IdentityFile line of ~/.ssh/config; mcp-patch doctor says which key each node uses. Then call again."
	case CauseHostKey:
		return "A person must check the host key out of band (console, provisioning records) and update known_hosts; never skip the check."
	case CauseSudo:
		return "Give the login user on " + node + " a NOPASSWD sudo rule (or log in as root), then call again."
	case CauseDpkgInterrupted:
		return "A person runs 'dpkg --configure -a' as root on " + node + " (it finishes the package operation that stopped half-way), reads its output, then calls again."
	case CauseDpkgLocked:
		return "Another apt or dpkg holds dpkg's lock on " + node + " (the reasons name the process): let it finish, or ask who runs it, and never kill it; then call again."
	case CauseDpkgAudit:
		return "A person reads 'dpkg --audit' on " + node + " and repairs the packages it names (usually 'dpkg --configure -a' as root), then calls again."
	case CauseBootShort:
		return "Free space on /boot of " + node + ": remove an old kernel that is not the running one (apt-get purge linux-image-<old release>) or grow /boot; then call again."
	case CauseRemoval:
		return "Never run an upgrade that removes packages: on " + node + " find what pulls them out (apt-get -s full-upgrade), pin or install the replacement, then simulate again."
	case CausePackages:
		return "Fix the holds on " + node + " as the reasons say (apt-mark hold the Kubernetes packages; a held package must not move), then simulate again."
	case CauseBoot:
		return "Fix the boot set-up on " + node + " as the reasons say (grubenv off mdraid/LVM/btrfs/zfs, kernel.panic set, a GRUB entry for the running kernel), or decide with a person; then inspect again."
	case CauseNvidia:
		return "Bring the NVIDIA kernel modules for the target kernel into " + node + "'s upgrade (linux-modules-nvidia-<branch>-<kernel>), or hold the kernel back there; then inspect again."
	}
	return "Read the reasons; fix the cause on " + node + " or ask a person, then call again."
}

// CauseOf tells why a host step failed from its error: the SSH layer's
// typed errors, and the refusals the host scripts word the same way every
// time (scripts/host/lib/apt-guard.sh, boot-space.sh).
func CauseOf(err error) Cause {
	var hk *host.HostKeyError
	var sudo *host.SudoError
	var nk *host.NoKeyError
	var se *StepError
	switch {
	case err == nil:
		return CauseOther
	case errors.As(err, &hk):
		return CauseHostKey
	case errors.As(err, &nk):
		return CauseNoKey
	case errors.As(err, &sudo):
		return CauseSudo
	case errors.As(err, &se):
		return CauseOfText(se.Reason)
	case errors.Is(err, ErrProtocol):
		return CauseOther
	}
	// Not a script's answer: the script did not run to its end (dial,
	// handshake, session or timeout).
	return CauseUnreachable
}

// causeOfText reads a cause from a host script's or a plan's words.
func CauseOfText(reason string) Cause {
	switch {
	case strings.Contains(reason, "dpkg was interrupted"):
		return CauseDpkgInterrupted
	case strings.Contains(reason, "dpkg is locked"), strings.Contains(reason, "dpkg's lock is held"):
		return CauseDpkgLocked
	case strings.Contains(reason, "dpkg --audit"):
		return CauseDpkgAudit
	case strings.Contains(reason, "MiB free"), strings.Contains(reason, "KiB free"), strings.Contains(reason, "unknown free"):
		return CauseBootShort
	case strings.Contains(reason, "would remove"):
		return CauseRemoval
	case strings.Contains(reason, "not held"), strings.Contains(reason, "held packages"), strings.Contains(reason, "Kubernetes packages"):
		return CausePackages
	}
	return CauseOther
}

// Hazard is one blocker a host survey found, with its cause.
type Hazard struct {
	Cause  Cause
	Reason string
}

// NextForHazards is the next step for what a survey found: each cause's
// step once, in the order found.
func NextForHazards(node string, hz []Hazard) string {
	seen := map[Cause]bool{}
	var next []string
	for _, h := range hz {
		if !seen[h.Cause] {
			seen[h.Cause] = true
			next = append(next, NextStepFor(h.Cause, node))
		}
	}
	return strings.Join(next, " ")
}

// InspectionHazards are the blockers in a survey of a node: dpkg's state,
// /boot's room for the pending kernels, the pending upgrade's blockers and
// the boot loader and NVIDIA checks the plan makes. Pure.
func InspectionHazards(insp Inspection, target string) []Hazard {
	var hz []Hazard
	add := func(c Cause, r string) { hz = append(hz, Hazard{c, r}) }
	if insp.Dpkg.Interrupted {
		add(CauseDpkgInterrupted, "dpkg was interrupted on this node (a package operation stopped half-way): nothing can be installed until '"+orFix(insp.Dpkg.FixCommand)+"' ran")
	} else if insp.Dpkg.Audit != "" {
		add(CauseDpkgAudit, "dpkg left packages half-way (dpkg --audit names them): "+strings.Join(strings.Fields(clipText(insp.Dpkg.Audit, 300)), " "))
	}
	if l := insp.Dpkg.Lock; l != nil {
		add(CauseDpkgLocked, "dpkg's lock is held now by "+l.Holder()+": a download or install would wait for it and then refuse")
	}
	if insp.Boot.Short {
		add(CauseBootShort, insp.Boot.ShortReason())
	}
	for _, b := range insp.Pending.Blockers {
		add(CauseOfText(b), "the pending upgrade would stop the round: "+b)
	}
	if insp.PendingError != "" && !insp.Dpkg.Interrupted {
		add(CauseOfText(insp.PendingError), "the pending upgrade could not be simulated: "+insp.PendingError)
	}
	if !insp.Grub.EnvWritableAtBoot {
		add(CauseBoot, "grubenv is not writable at boot here ("+strings.Join(insp.Grub.Reasons, "; ")+"): a one-shot trial boot is unreliable")
	}
	switch {
	case insp.KernelPanic == 0:
		add(CauseBoot, "kernel.panic is 0: a panicking kernel would hang instead of falling back")
	case insp.KernelPanic < 0:
		add(CauseBoot, "kernel.panic could not be read: a panicking kernel may hang instead of falling back")
	}
	if target != "" && !insp.TargetModules.Present && len(insp.NvidiaPackages) > 0 {
		add(CauseNvidia, "no NVIDIA kernel modules for the target kernel "+target)
	}
	return hz
}

// SimulationHazards are the blockers of a simulated upgrade. Pure.
func SimulationHazards(sim Simulation) []Hazard {
	var hz []Hazard
	for _, b := range sim.Plan.Blockers {
		c := CauseOfText(b)
		if sim.Boot.Short && b == sim.Boot.ShortReason() {
			c = CauseBootShort
		}
		hz = append(hz, Hazard{c, b})
	}
	return hz
}

// Holder names the process holding dpkg's lock.
func (l *DpkgLock) Holder() string {
	pid := "an unknown process"
	if l.PID != nil {
		pid = fmt.Sprintf("process %d", *l.PID)
	}
	if l.Command != "" {
		return pid + " (" + l.Command + ")"
	}
	return pid
}

func orFix(cmd string) string {
	if cmd == "" {
		return "dpkg --configure -a"
	}
	return cmd
}

func clipText(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}
