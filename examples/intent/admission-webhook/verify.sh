#!/bin/sh
# admission-webhook verify: full replicas, spread over nodes, fails closed
# without blocking its own recovery.
#
#   sh admission-webhook/verify.sh    static checks, plus the cluster when
#                                     kubectl reaches one (KUBECONFIG)
#
# Output and exit status: see ../README.md ("verify.sh").
set -eu

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../lib/verify.sh
. "$here/../lib/verify.sh"
settings="$here/settings.yaml"

v_intent_well_formed "$here"

ns=$(v_setting "$settings" webhook/namespace)
deploy=$(v_setting "$settings" webhook/deployment)
config=$(v_setting "$settings" webhook/configuration)
cert_days=$(v_setting "$settings" webhook/min_cert_days)
if [ -n "$ns" ] && [ -n "$deploy" ] && [ -n "$config" ] && v_is_uint "$cert_days"; then
	v_ok "settings name deployment $ns/$deploy and webhook configuration $config"
else
	v_fail "webhook settings: namespace '$ns', deployment '$deploy', configuration '$config', min_cert_days '$cert_days'"
fi

if v_cluster_reachable; then
	counts=$(v_kube -n "$ns" get deployment "$deploy" -o jsonpath='{.status.readyReplicas} {.spec.replicas}' 2>/dev/null || true)
	if [ -z "$counts" ]; then
		v_fail "P1 deployment $ns/$deploy not found"
	else
		# shellcheck disable=SC2086 # split "ready wanted" on purpose
		set -- $counts
		if [ "$#" -eq 2 ] && [ "$1" = "$2" ]; then
			v_ok "P1 $1/$2 replicas ready"
		else
			v_fail "P1 replicas ready/wanted: $counts"
		fi
	fi

	selector=$(v_kube -n "$ns" get deployment "$deploy" -o jsonpath='{.spec.selector.matchLabels}' 2>/dev/null |
		sed -e 's/[{}"]//g' -e 's/:/=/g' || true)
	if [ -n "$selector" ]; then
		nodes=$(v_kube -n "$ns" get pods -l "$selector" -o jsonpath='{range .items[*]}{.spec.nodeName}{"\n"}{end}' | grep . || true)
		doubled=$(printf '%s\n' "$nodes" | sort | uniq -d | tr '\n' ' ')
		if [ -z "$doubled" ]; then
			v_ok "P2 no node holds two replicas"
		else
			v_fail "P2 nodes holding more than one replica: $doubled"
		fi
	fi

	excluded=$(v_kube get validatingwebhookconfiguration "$config" \
		-o jsonpath='{range .webhooks[*]}{.namespaceSelector.matchExpressions[*].values[*]}{"\n"}{end}' 2>/dev/null || true)
	missing=""
	for want in kube-system "$ns"; do
		printf '%s\n' "$excluded" | tr ' ' '\n' | grep -qx "$want" || missing="$missing $want"
	done
	if [ -z "$excluded" ]; then
		v_fail "P3 webhook configuration $config not found or has no namespaceSelector expressions"
	elif [ -z "$missing" ]; then
		v_ok "P3 webhook configuration $config excludes kube-system and $ns"
	else
		v_fail "P3 webhook configuration $config does not name:$missing"
	fi
else
	v_skip_live "P1 P2 P3 webhook replicas and configuration: no cluster reachable with kubectl"
fi

v_finish admission-webhook
