package drain

import (
	"strings"
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestUnsatisfiable(t *testing.T) {
	pdb := func(minAvail, maxUnavail *intstr.IntOrString) policyv1.PodDisruptionBudget {
		return policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "b"},
			Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: minAvail, MaxUnavailable: maxUnavail}}
	}
	i := func(v int) *intstr.IntOrString { x := intstr.FromInt32(int32(v)); return &x }
	pc := func(v string) *intstr.IntOrString { x := intstr.FromString(v); return &x }
	cases := []struct {
		name         string
		pdb          policyv1.PodDisruptionBudget
		selected, pg int
		want         string
	}{
		{"maxUnavailable 0", pdb(nil, i(0)), 3, 0, "maxUnavailable 0"},
		{"maxUnavailable 0%", pdb(nil, pc("0%")), 3, 0, "maxUnavailable 0%"},
		{"maxUnavailable 1", pdb(nil, i(1)), 3, 0, ""},
		{"minAvailable = replicas", pdb(i(2), nil), 2, 0, "minAvailable 2 for 2 pod(s)"},
		{"minAvailable above replicas", pdb(i(3), nil), 2, 0, "minAvailable 3 for 2 pod(s)"},
		{"minAvailable 100%", pdb(pc("100%"), nil), 4, 0, "minAvailable 100%"},
		{"minAvailable below replicas", pdb(i(1), nil), 2, 0, ""},
		{"minAvailable 50%", pdb(pc("50%"), nil), 2, 0, ""},
		{"CNPG primary with replicas switches over", pdb(i(1), nil), 1, 3, ""},
		{"single-instance CNPG primary", pdb(i(1), nil), 1, 1, "single-instance CloudNativePG cluster"},
		{"no pods selected", pdb(i(1), nil), 0, 0, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Unsatisfiable(tc.pdb, tc.selected, tc.pg)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("Unsatisfiable = %q, want ~%q", got, tc.want)
			}
		})
	}
}
