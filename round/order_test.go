package round

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestPlanOrder(t *testing.T) {
	cp := func(name string) NodeInfo { return NodeInfo{Name: name, ControlPlane: true} }
	gpu := func(name string, pods int) NodeInfo { return NodeInfo{Name: name, GPU: true, RunningGPUPods: pods} }
	tests := []struct {
		name  string
		nodes []NodeInfo
		place Placement
		want  []string // node order
		roles []Role
		// reasonHas: node -> words its reason must contain
		reasonHas map[string][]string
		notesHave []string
		canary    string
	}{
		{
			name:  "primary and VIP on the same node go last",
			nodes: []NodeInfo{cp("cp-3"), cp("cp-1"), cp("cp-2"), gpu("gpu-b", 3), gpu("gpu-a", 5)},
			place: Placement{PostgresPrimaryNodes: []string{"cp-1"}, VIPNode: "cp-1"},
			want:  []string{"cp-2", "cp-3", "cp-1", "gpu-b", "gpu-a"},
			roles: []Role{RoleControlPlane, RoleControlPlane, RoleControlPlane, RoleGPU, RoleGPU},
			reasonHas: map[string][]string{
				"cp-1":  {"both the Postgres primary and the API VIP", "last"},
				"gpu-b": {"fewest GPU pods (3"},
				"gpu-a": {"after the canary gpu-b"},
			},
			canary: "gpu-b",
		},
		{
			name:  "primary and VIP on different nodes both go at the end, VIP last",
			nodes: []NodeInfo{cp("cp-1"), cp("cp-2"), cp("cp-3"), cp("cp-4")},
			place: Placement{PostgresPrimaryNodes: []string{"cp-1"}, VIPNode: "cp-2"},
			want:  []string{"cp-3", "cp-4", "cp-1", "cp-2"},
			reasonHas: map[string][]string{
				"cp-1": {"Postgres primary", "the API VIP is on cp-2, a different node, so both go at the end"},
				"cp-2": {"API VIP", "the Postgres primary is on cp-1, a different node, so both go at the end"},
				"cp-3": {"patched first"},
			},
		},
		{
			name:  "two Postgres clusters with primaries on two nodes, VIP on a third",
			nodes: []NodeInfo{cp("a"), cp("b"), cp("c"), cp("d")},
			place: Placement{PostgresPrimaryNodes: []string{"c", "b", "c"}, VIPNode: "a"},
			want:  []string{"d", "b", "c", "a"},
			reasonHas: map[string][]string{
				"c": {"(2 cluster(s))"},
				"a": {"the Postgres primary is on b, c"},
			},
		},
		{
			name:  "no GPU servers",
			nodes: []NodeInfo{cp("cp-2"), cp("cp-1"), {Name: "infra-1"}, {Name: "infra-0"}},
			place: Placement{VIPNode: "cp-1"},
			want:  []string{"cp-2", "cp-1", "infra-0", "infra-1"},
			roles: []Role{RoleControlPlane, RoleControlPlane, RoleOther, RoleOther},
			reasonHas: map[string][]string{
				"cp-1":    {"API VIP"},
				"infra-0": {"neither control plane nor GPU server"},
			},
		},
		{
			name: "labelled canary wins over fewer pods",
			nodes: []NodeInfo{cp("cp-1"), gpu("gpu-1", 0), gpu("gpu-2", 0),
				{Name: "gpu-9", GPU: true, Canary: true, RunningGPUPods: 7}},
			want:      []string{"cp-1", "gpu-9", "gpu-1", "gpu-2"},
			reasonHas: map[string][]string{"gpu-9": {"labelled canary"}},
			canary:    "gpu-9",
		},
		{
			name: "several labelled canaries: fewest pods among them, noted",
			nodes: []NodeInfo{{Name: "g3", GPU: true, Canary: true, RunningGPUPods: 2},
				{Name: "g2", GPU: true, Canary: true, RunningGPUPods: 1}, gpu("g1", 0)},
			want:      []string{"g2", "g1", "g3"},
			notesHave: []string{"several GPU servers carry the canary label (g2, g3); g2 runs the fewest GPU pods"},
			canary:    "g2",
		},
		{
			name:      "canary by fewest GPU pods, ties by name",
			nodes:     []NodeInfo{gpu("gpu-c", 4), gpu("gpu-b", 1), gpu("gpu-a", 1), gpu("gpu-d", 2)},
			want:      []string{"gpu-a", "gpu-b", "gpu-c", "gpu-d"},
			reasonHas: map[string][]string{"gpu-a": {"fewest GPU pods (1, ties by name)"}},
			canary:    "gpu-a",
		},
		{
			name:   "canary named by the intent",
			nodes:  []NodeInfo{gpu("gpu-a", 0), gpu("gpu-b", 9)},
			place:  Placement{CanaryNode: "gpu-b"},
			want:   []string{"gpu-b", "gpu-a"},
			canary: "gpu-b",
		},
		{
			name:      "primary on a GPU server does not move the control plane",
			nodes:     []NodeInfo{cp("cp-1"), cp("cp-2"), gpu("gpu-a", 0)},
			place:     Placement{PostgresPrimaryNodes: []string{"gpu-a"}},
			want:      []string{"cp-1", "cp-2", "gpu-a"},
			notesHave: []string{"Postgres primary runs on gpu-a, which is not a control-plane node"},
			canary:    "gpu-a",
		},
		{
			name:   "control-plane node with GPUs is patched as control plane",
			nodes:  []NodeInfo{{Name: "cp-g", ControlPlane: true, GPU: true}, gpu("gpu-a", 0)},
			want:   []string{"cp-g", "gpu-a"},
			roles:  []Role{RoleControlPlane, RoleGPU},
			canary: "gpu-a",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PlanOrder(tc.nodes, tc.place)
			if err != nil {
				t.Fatalf("PlanOrder: %v", err)
			}
			var names []string
			var roles []Role
			canary := ""
			for _, p := range got.Positions {
				names = append(names, p.Node)
				roles = append(roles, p.Role)
				if p.Canary {
					if canary != "" {
						t.Errorf("two canaries: %s and %s", canary, p.Node)
					}
					canary = p.Node
				}
				if p.Reason == "" {
					t.Errorf("%s has no reason", p.Node)
				}
			}
			if diff := cmp.Diff(tc.want, names); diff != "" {
				t.Errorf("order (-want +got):\n%s", diff)
			}
			if tc.roles != nil {
				if diff := cmp.Diff(tc.roles, roles); diff != "" {
					t.Errorf("roles (-want +got):\n%s", diff)
				}
			}
			if canary != tc.canary {
				t.Errorf("canary = %q, want %q", canary, tc.canary)
			}
			for node, words := range tc.reasonHas {
				reason := got.Positions[got.Index(node)].Reason
				for _, w := range words {
					if !strings.Contains(reason, w) {
						t.Errorf("reason of %s = %q, want it to contain %q", node, reason, w)
					}
				}
			}
			for _, n := range tc.notesHave {
				if !strings.Contains(strings.Join(got.Notes, "\n"), n) {
					t.Errorf("notes %q lack %q", got.Notes, n)
				}
			}
			// Deterministic: the same input in another order gives the same order.
			rev := make([]NodeInfo, len(tc.nodes))
			for i, n := range tc.nodes {
				rev[len(rev)-1-i] = n
			}
			again, err := PlanOrder(rev, tc.place)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(got, again); diff != "" {
				t.Errorf("order depends on input order (-first +reversed):\n%s", diff)
			}
		})
	}
}

func TestPlanOrderRefusesBadInput(t *testing.T) {
	tests := []struct {
		name  string
		nodes []NodeInfo
		place Placement
		want  string
	}{
		{"empty inventory", nil, Placement{}, "no nodes"},
		{"duplicate node", []NodeInfo{{Name: "a"}, {Name: "a"}}, Placement{}, "listed twice"},
		{"empty name", []NodeInfo{{Name: ""}}, Placement{}, "bad node name"},
		{"primary on unknown node", []NodeInfo{{Name: "a"}}, Placement{PostgresPrimaryNodes: []string{"x"}}, "Postgres primary on node x"},
		{"VIP on unknown node", []NodeInfo{{Name: "a"}}, Placement{VIPNode: "x"}, "API VIP on node x"},
		{"canary not a GPU server", []NodeInfo{{Name: "a"}}, Placement{CanaryNode: "a"}, "not a GPU server"},
		{"negative pods", []NodeInfo{{Name: "g", GPU: true, RunningGPUPods: -1}}, Placement{}, "negative"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := PlanOrder(tc.nodes, tc.place)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("PlanOrder error = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}
