#!/bin/sh
# control-plane verify: etcd quorum, the API through its VIP, OIDC sign-in.
#
#   sh control-plane/verify.sh    static checks, plus the cluster when kubectl
#                                 reaches one (KUBECONFIG)
#
# Output and exit status: see ../README.md ("verify.sh").
set -eu

here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../lib/verify.sh
. "$here/../lib/verify.sh"
settings="$here/settings.yaml"

v_intent_well_formed "$here"

members=$(v_setting "$settings" control_plane/etcd_members)
if v_is_uint "$members" && [ "$members" -ge 3 ] && [ $((members % 2)) -eq 1 ]; then
	v_ok "P1 etcd_members is $members (odd, at least 3: one may be down)"
else
	v_fail "P1 control_plane.etcd_members is '$members', want an odd number of at least 3"
fi

vip=$(v_setting "$settings" control_plane/api_vip)
port=$(v_setting "$settings" control_plane/api_port)
if [ -n "$vip" ] && v_is_uint "$port" && [ "$port" -ge 1 ] && [ "$port" -le 65535 ]; then
	v_ok "P3 API VIP is $vip:$port"
else
	v_fail "P3 control_plane.api_vip '$vip' / api_port '$port' are not an address and a port"
fi

issuer=$(v_setting "$settings" control_plane/oidc/issuer_url)
case $issuer in
https://?*) v_ok "P4 OIDC issuer is $issuer" ;;
*) v_fail "P4 control_plane.oidc.issuer_url is '$issuer', want an https URL" ;;
esac

if v_cluster_reachable; then
	label=$(v_setting "$settings" control_plane/node_label)
	ready=$(v_kube -n kube-system get pods -l component=etcd \
		-o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '^True$' || true)
	if [ "$ready" -eq "$members" ]; then
		v_ok "P1 all $members etcd members are Ready"
	else
		v_fail "P1 $ready of $members etcd members are Ready"
	fi

	nodes=$(v_kube get nodes -l "$label" -o name | grep -c . || true)
	if [ "$nodes" -eq "$members" ]; then
		v_ok "P1 $nodes nodes carry $label"
	else
		v_fail "P1 $nodes nodes carry $label, want $members"
	fi

	if v_kube --server "https://$vip:$port" get --raw=/readyz >/dev/null 2>&1; then
		v_ok "P3 the API answers /readyz through the VIP $vip:$port"
	else
		v_fail "P3 the API does not answer /readyz through the VIP $vip:$port"
	fi

	lease_ns=$(v_setting "$settings" control_plane/vip_lease/namespace)
	lease=$(v_setting "$settings" control_plane/vip_lease/name)
	holder=$(v_kube -n "$lease_ns" get lease "$lease" -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
	if [ -n "$holder" ]; then
		v_ok "P3 VIP lease $lease_ns/$lease is held by $holder"
	else
		v_fail "P3 VIP lease $lease_ns/$lease has no holder"
	fi

	if command -v curl >/dev/null 2>&1; then
		doc=$(curl -fsS --max-time 10 "$issuer/.well-known/openid-configuration" 2>/dev/null || true)
		case $doc in
		*"\"issuer\":\"$issuer\""* | *"\"issuer\": \"$issuer\""*)
			v_ok "P4 OIDC discovery answers for $issuer" ;;
		'') v_fail "P4 OIDC discovery at $issuer/.well-known/openid-configuration does not answer" ;;
		*) v_fail "P4 OIDC discovery at $issuer names another issuer" ;;
		esac
	else
		v_skip_live "P4 OIDC discovery: curl not found"
	fi
else
	v_skip_live "P1 P3 P4 etcd, VIP and OIDC: no cluster reachable with kubectl"
fi

v_finish control-plane
