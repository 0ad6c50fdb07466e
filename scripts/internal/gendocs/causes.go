package main

import (
	"fmt"
	"strings"

	"github.com/mcp-patch/mcp-patch/host/steps"
)

// causeDir is the package folder that declares the host causes, for the
// test that every cause has an entry here.
const causeDir = "host/steps"

// cause is a host cause's entry in docs/troubleshooting.md: its title and
// how a person recognises it; the next step comes from the code.
type cause struct {
	id         steps.Cause
	title      string
	recognised string
}

// causes are the host causes in the order a person meets them: reaching
// the host, then dpkg, /boot, the packages, the boot loader, the drivers.
var causes = []cause{
	{steps.CauseUnreachable, "The node cannot be reached",
		"A host step did not run to its end: the SSH dial, handshake or session failed, or the step timed out (`ssh.dial_timeout`, `ssh.command_timeout`). `mcp-patch doctor` tries every inventory node's login."},
	{steps.CauseNoKey, "No SSH key to log in with",
		"The reasons say `no SSH key for node NODE: ...`: no ssh-agent to ask (`SSH_AUTH_SOCK` not set), or the agent holds no keys or cannot be reached, and no identity file gave a key (the identity files tried are named). `mcp-patch doctor` says which key each node logs in with."},
	{steps.CauseHostKey, "The node's host key changed",
		"The key the node offers is not the one `ssh.known_hosts` holds for it (or its `host_key_alias`). mcp-patch never connects past a changed or unknown key."},
	{steps.CauseSudo, "The login user cannot run commands as root",
		"The reasons say `cannot run commands as root without a password` (sudo asked for one). Host steps run as root: a root login, or `sudo -n`."},
	{steps.CauseDpkgInterrupted, "dpkg was interrupted",
		"`inspect_node` or a step says `dpkg was interrupted`: a package operation stopped half-way, and apt refuses to do anything until it is finished."},
	{steps.CauseDpkgLocked, "dpkg's lock is held",
		"The reasons say `dpkg is locked` or `dpkg's lock is held now by process N (command)`: another apt or dpkg runs (unattended-upgrades, a person). A download or install waits `ssh.dpkg_lock_timeout` for it, then refuses."},
	{steps.CauseDpkgAudit, "dpkg left packages half-way",
		"`inspect_node` reports packages `dpkg --audit` names (half-installed, half-configured, triggers pending)."},
	{steps.CauseBootShort, "/boot is short of room",
		"The reasons say how much /boot has free (`/boot has 336 KiB free`, sizes under 1 MiB in KiB) against what the pending kernels need, as `simulate_upgrade` measures it."},
	{steps.CauseRemoval, "The upgrade would remove a package",
		"`simulate_upgrade` (or the plan's preflight) says `would remove N package(s): ...`. A round never runs an upgrade that removes a package."},
	{steps.CausePackages, "Package holds are wrong",
		"The reasons name a Kubernetes package that is `not held`, or a held package the upgrade would move."},
	{steps.CauseBoot, "The boot set-up cannot trial-boot safely",
		"`inspect_node` says grubenv is not writable at boot (on mdraid, LVM, btrfs or ZFS), `kernel.panic is 0` (a panicking kernel would hang instead of falling back), or GRUB has no entry for the running kernel."},
	{steps.CauseNvidia, "No NVIDIA modules for the target kernel",
		"`inspect_node` says `no NVIDIA kernel modules for the target kernel ...` on a GPU server: after the reboot the driver would not load."},
	{steps.CauseOther, "Anything else",
		"A reason that matches none of the causes above."},
}

// causesSection is the generated part of docs/troubleshooting.md: one
// entry per host cause, with the next step the tools give for it.
func causesSection() (string, error) {
	var b strings.Builder
	b.WriteString("\n")
	for _, c := range causes {
		fmt.Fprintf(&b, "### %s\n\n", c.title)
		fmt.Fprintf(&b, "Cause `%s`. %s\n\n", c.id, c.recognised)
		next := steps.NextStepFor(c.id, "NODE")
		if next == "" {
			return "", fmt.Errorf("cause %s has no next step", c.id)
		}
		fmt.Fprintf(&b, "**Next step** (as the tools say it, for a node NODE): %s\n\n", next)
	}
	return b.String(), nil
}
