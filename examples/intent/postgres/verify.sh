#!/bin/sh
# postgres verify: the CloudNativePG cluster is whole, with a fresh backup.
#
#   sh postgres/verify.sh    static checks, plus the cluster when kubectl
#                            reaches one (KUBECONFIG)
#
# Output and exit status: see ../README.md ("verify.sh").
set -eu

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../lib/verify.sh
. "$here/../lib/verify.sh"
settings="$here/settings.yaml"

v_intent_well_formed "$here"

ns=$(v_setting "$settings" postgres/namespace)
cluster=$(v_setting "$settings" postgres/cluster)
instances=$(v_setting "$settings" postgres/instances)
max_age=$(v_setting "$settings" postgres/max_backup_age_hours)
if [ -n "$ns" ] && [ -n "$cluster" ] && v_is_uint "$instances" && [ "$instances" -ge 2 ] &&
	v_is_uint "$max_age" && [ "$max_age" -ge 1 ]; then
	v_ok "settings name $ns/$cluster with $instances instances, backups younger than ${max_age}h"
else
	v_fail "postgres settings: namespace '$ns', cluster '$cluster', instances '$instances' (at least 2), max_backup_age_hours '$max_age'"
fi

if v_cluster_reachable; then
	state=$(v_kube -n "$ns" get clusters.postgresql.cnpg.io "$cluster" \
		-o jsonpath='{.status.readyInstances}|{.spec.instances}|{.status.phase}|{.status.currentPrimary}|{.status.lastSuccessfulBackup}' 2>/dev/null || true)
	if [ -z "$state" ]; then
		v_fail "P1 Cluster $ns/$cluster not found"
	else
		ready=${state%%|*}
		rest=${state#*|}
		spec=${rest%%|*}
		rest=${rest#*|}
		phase=${rest%%|*}
		rest=${rest#*|}
		primary=${rest%%|*}
		backup=${rest#*|}
		if [ "$ready" = "$spec" ] && [ "$spec" = "$instances" ] && [ "$phase" = "Cluster in healthy state" ]; then
			v_ok "P1 $ready/$spec instances ready, primary $primary"
		else
			v_fail "P1 ${ready:-0}/$spec instances ready (settings say $instances), phase '$phase'"
		fi
		if [ -z "$backup" ]; then
			v_fail "P4 no successful backup recorded"
		else
			now=$(date -u +%s)
			then_s=$(date -u -d "$backup" +%s 2>/dev/null || echo '')
			if [ -z "$then_s" ]; then
				v_fail "P4 lastSuccessfulBackup '$backup' is not a date this host can read"
			elif [ $((now - then_s)) -le $((max_age * 3600)) ]; then
				v_ok "P4 last successful backup $backup"
			else
				v_fail "P4 last successful backup $backup is older than ${max_age}h"
			fi
		fi
	fi
else
	v_skip_live "P1 P4 CloudNativePG cluster state: no cluster reachable with kubectl"
fi

v_finish postgres
