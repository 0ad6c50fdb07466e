#!/bin/sh
# gpu-fleet verify: GPU count, canary label, model endpoint.
#
#   sh gpu-fleet/verify.sh    static checks, plus the cluster when kubectl
#                             reaches one (KUBECONFIG) and the model endpoint
#                             when it answers
#
# Host-side checks (driver vermagic, Fabric Manager, RDMA links) run per node
# in the window's GPU acceptance; see runbook.md.
# Output and exit status: see ../README.md ("verify.sh").
set -eu

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../lib/verify.sh
. "$here/../lib/verify.sh"
settings="$here/settings.yaml"

v_intent_well_formed "$here"

gpus=$(v_setting "$settings" gpu/expected_gpus_per_server)
rdma=$(v_setting "$settings" gpu/rdma_devices)
if v_is_uint "$gpus" && [ "$gpus" -ge 1 ] && v_is_uint "$rdma"; then
	v_ok "P1 P4 expect $gpus GPUs and $rdma RDMA devices per server"
else
	v_fail "P1 P4 gpu.expected_gpus_per_server '$gpus' (at least 1) or gpu.rdma_devices '$rdma' is not a number"
fi

label=$(v_setting "$settings" gpu/node_label)
canary=$(v_setting "$settings" gpu/canary_label)
url=$(v_setting "$settings" gpu/model_endpoint/url)
case $url in
http://?* | https://?*) v_ok "P5 model endpoint is $url" ;;
*) v_fail "P5 gpu.model_endpoint.url is '$url', want an http(s) URL" ;;
esac

if v_cluster_reachable; then
	short=$(v_kube get nodes -l "$label" \
		-o jsonpath='{range .items[*]}{.metadata.name}{" "}{.status.allocatable.nvidia\.com/gpu}{"\n"}{end}' |
		awk -v want="$gpus" '$2 != want { printf "%s(%s) ", $1, ($2 == "" ? 0 : $2) }')
	servers=$(v_kube get nodes -l "$label" -o name | grep -c . || true)
	if [ "$servers" -eq 0 ]; then
		v_fail "P1 no node carries $label"
	elif [ -z "$short" ]; then
		v_ok "P1 all $servers GPU servers have $gpus GPUs allocatable"
	else
		v_fail "P1 GPU servers short of $gpus GPUs: $short"
	fi

	canaries=$(v_kube get nodes -l "$canary,$label" -o name | sed 's|^node/||')
	count=$(printf '%s\n' "$canaries" | grep -c . || true)
	if [ "$count" -eq 1 ]; then
		v_ok "P6 one canary GPU server: $canaries"
	else
		v_fail "P6 $count GPU servers carry $canary, want exactly one"
	fi
else
	v_skip_live "P1 P6 GPU counts and canary: no cluster reachable with kubectl"
fi

models=${url%/completions}/models
if command -v curl >/dev/null 2>&1 && curl -fsS --max-time 10 "$models" >/dev/null 2>&1; then
	v_ok "P5 model server answers at $models"
else
	v_skip_live "P5 model server at $models does not answer from here (the window's GPU acceptance runs a real completion in the cluster)"
fi

v_finish gpu-fleet
