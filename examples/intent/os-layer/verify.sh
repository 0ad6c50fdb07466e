#!/bin/sh
# os-layer verify: does the fleet keep the os-layer properties (intent.md)?
#
#   sh os-layer/verify.sh                 static checks, plus the cluster when
#                                         kubectl reaches one (KUBECONFIG)
#   MCP_PATCH_VERIFY_HOST=1 sh verify.sh  also check this machine as a node:
#                                         sysctls, package holds, bonds
#
# MCP_PATCH_PROC_ROOT (default /proc) is where sysctls and bonds are read.
# Output and exit status: see ../README.md ("verify.sh").
set -eu

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../lib/verify.sh
. "$here/../lib/verify.sh"
settings="$here/settings.yaml"
proc=${MCP_PATCH_PROC_ROOT:-/proc}

v_intent_well_formed "$here"

# --- settings (P6, P8, P9, P4) ---
soak=$(v_setting "$settings" kernel/soak_hours)
if v_is_uint "$soak" && [ "$soak" -ge 48 ]; then
	v_ok "P8 soak before autoremove is ${soak}h (at least 48h)"
else
	v_fail "P8 kernel.soak_hours is '$soak', want an integer of at least 48"
fi

held=$(v_list "$(v_setting "$settings" kernel/held_packages)")
missing=""
for pkg in containerd kubelet kubeadm kubectl cri-tools; do
	printf '%s\n' "$held" | grep -qx "$pkg" || missing="$missing $pkg"
done
if [ -z "$missing" ]; then
	v_ok "P6 held packages include containerd kubelet kubeadm kubectl cri-tools"
else
	v_fail "P6 kernel.held_packages lacks:$missing"
fi

internal=$(v_setting "$settings" kernel/compliance_deadline_days/internal)
external=$(v_setting "$settings" kernel/compliance_deadline_days/external_facing)
if v_is_uint "$internal" && v_is_uint "$external" &&
	[ "$internal" -ge 1 ] && [ "$internal" -le 14 ] &&
	[ "$external" -ge 1 ] && [ "$external" -le 2 ]; then
	v_ok "P9 compliance deadlines: internal ${internal}d, external-facing ${external}d"
else
	v_fail "P9 compliance deadlines internal='$internal' external_facing='$external', want 1-14 and 1-2 days"
fi

panic_want=$(v_setting "$settings" kernel/panic_reboot_seconds)
panic_sysctl=$(v_setting "$settings" node/sysctls/kernel.panic)
if v_is_uint "$panic_want" && [ "$panic_want" -gt 0 ] && [ "$panic_sysctl" = "$panic_want" ]; then
	v_ok "P4 kernel.panic=${panic_want} is a verified sysctl, so a panicking trial kernel falls back"
else
	v_fail "P4 kernel.panic_reboot_seconds='$panic_want' and node.sysctls kernel.panic='$panic_sysctl' must be equal and above 0"
fi

policy=$(v_setting "$settings" drain/emptydir_policy)
case $policy in
delete | refuse) v_ok "drain.emptydir_policy is '$policy'" ;;
*) v_fail "drain.emptydir_policy is '$policy', want delete or refuse" ;;
esac

# --- this machine as a node (P3, P6) ---
if [ "${MCP_PATCH_VERIFY_HOST:-0}" = 1 ]; then
	for name in $(v_keys "$settings" node/sysctls); do
		want=$(v_setting "$settings" "node/sysctls/$name")
		file="$proc/sys/$(printf '%s' "$name" | tr . /)"
		if [ ! -r "$file" ]; then
			v_fail "P3 sysctl $name: $file is not readable"
			continue
		fi
		got=$(tr -s ' \t' ' ' <"$file")
		if [ "$got" = "$want" ]; then
			v_ok "P3 sysctl $name = $want"
		else
			v_fail "P3 sysctl $name is '$got', want '$want'"
		fi
	done

	if command -v apt-mark >/dev/null 2>&1; then
		holds=$(apt-mark showhold 2>/dev/null || true)
		missing=""
		for pkg in $held; do
			printf '%s\n' "$holds" | grep -qx "$pkg" || missing="$missing $pkg"
		done
		if [ -z "$missing" ]; then
			v_ok "P6 held on this host: $(printf '%s' "$held" | tr '\n' ' ')"
		else
			v_fail "P6 not held on this host:$missing"
		fi
	else
		v_skip_live "P6 package holds: apt-mark not found"
	fi

	for bond in $(v_keys "$settings" node/bonds); do
		want=$(v_setting "$settings" "node/bonds/$bond/min_active_slaves")
		file="$proc/net/bonding/$bond"
		if [ ! -r "$file" ]; then
			v_fail "P3 bond $bond: $file is not readable"
			continue
		fi
		up=$(awk '/^Slave Interface:/ { s = 1; next } s && /^MII Status:/ { if ($3 == "up") n++; s = 0 } END { print n + 0 }' "$file")
		if [ "$up" -ge "$want" ]; then
			v_ok "P3 bond $bond has $up slaves up (at least $want)"
		else
			v_fail "P3 bond $bond has $up slaves up, want at least $want"
		fi
	done
fi

# --- the cluster (P7) ---
if v_cluster_reachable; then
	not_ready=$(v_kube get nodes -o jsonpath='{range .items[*]}{.metadata.name}{" "}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' |
		awk '$2 != "True" { print $1 }' | tr '\n' ' ')
	if [ -z "$not_ready" ]; then
		v_ok "every node is Ready"
	else
		v_fail "nodes not Ready: $not_ready"
	fi
	for class in control-plane worker; do
		if [ "$class" = control-plane ]; then
			selector=node-role.kubernetes.io/control-plane
		else
			selector='!node-role.kubernetes.io/control-plane'
		fi
		kernels=$(v_kube get nodes -l "$selector" -o jsonpath='{range .items[*]}{.status.nodeInfo.kernelVersion}{"\n"}{end}' | sort | uniq -c | sed 's/^ *//')
		count=$(printf '%s\n' "$kernels" | grep -c . || true)
		if [ "$count" -le 1 ]; then
			v_ok "P7 $class nodes run one kernel: ${kernels:-none}"
		else
			v_fail "P7 $class nodes run $count kernels: $(printf '%s' "$kernels" | tr '\n' ';')"
		fi
	done
else
	v_skip_live "P7 fleet kernel consistency: no cluster reachable with kubectl"
fi

v_finish os-layer
