package gate

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// fixtureStatuses reads `etcdctl endpoint status -w json` (3 healthy
// members) into what CheckEtcd collects.
func fixtureStatuses(t *testing.T) []memberStatus {
	t.Helper()
	var raw []struct {
		Endpoint string
		Status   struct {
			Header struct {
				MemberID uint64 `json:"member_id"`
			} `json:"header"`
			Version   string   `json:"version"`
			DBSize    int64    `json:"dbSize"`
			Leader    uint64   `json:"leader"`
			RaftIndex uint64   `json:"raftIndex"`
			RaftTerm  uint64   `json:"raftTerm"`
			Errors    []string `json:"errors"`
			IsLearner bool     `json:"isLearner"`
		}
	}
	if err := json.Unmarshal(readFixture(t, "etcdctl-endpoint-status-w-json_3-members_jq-pretty_etcd-3.5.4.json"), &raw); err != nil {
		t.Fatal(err)
	}
	out := make([]memberStatus, len(raw))
	for i, r := range raw {
		out[i] = memberStatus{Endpoint: r.Endpoint, ID: r.Status.Header.MemberID, Leader: r.Status.Leader,
			RaftTerm: r.Status.RaftTerm, RaftIndex: r.Status.RaftIndex, Version: r.Status.Version,
			DBSize: r.Status.DBSize, Errors: r.Status.Errors, IsLearner: r.Status.IsLearner}
	}
	return out
}

func TestJudgeEtcd(t *testing.T) {
	base := fixtureStatuses(t)
	if len(base) != 3 {
		t.Fatalf("fixture has %d members", len(base))
	}
	members := func(st []memberStatus) []etcdMember {
		var m []etcdMember
		for _, s := range st {
			m = append(m, etcdMember{ID: s.ID, Name: s.Endpoint, ClientURLs: []string{s.Endpoint}})
		}
		return m
	}
	down := func(st []memberStatus, idx ...int) []memberStatus {
		out := append([]memberStatus(nil), st...)
		for _, i := range idx {
			out[i] = memberStatus{Endpoint: out[i].Endpoint, Err: "connection refused"}
		}
		return out
	}
	tests := []struct {
		name        string
		members     []etcdMember
		listErr     error
		statuses    []memberStatus
		alarms      []string
		wantOK      bool
		wantReason  string
		wantWarning string
	}{
		{name: "three healthy members", members: members(base), statuses: base, wantOK: true},
		{name: "one down: quorum kept, warned", members: members(base), statuses: down(base, 0), wantOK: true,
			wantWarning: "1 member(s) down (https://master-0.etcd.cfcr.internal:2379); quorum kept with 2 of 3 — 1 more failure(s) lose it"},
		{name: "two down: quorum lost", members: members(base), statuses: down(base, 0, 2),
			wantReason: "quorum lost: 1 of 3 voting members answer, 2 needed"},
		{name: "all down, no member list", statuses: down(base, 0, 1, 2),
			wantReason: "quorum lost: 0 of 3 voting members answer, 2 needed"},
		{name: "members disagree on the leader", members: members(base),
			statuses:   func() []memberStatus { s := append([]memberStatus(nil), base...); s[1].Leader = s[1].ID; return s }(),
			wantReason: "members disagree on the leader"},
		{name: "no leader", members: members(base),
			statuses: func() []memberStatus {
				s := append([]memberStatus(nil), base...)
				for i := range s {
					s[i].Leader = 0
				}
				return s
			}(),
			wantReason: "no leader elected"},
		{name: "NOSPACE alarm in a member's status", members: members(base),
			statuses: func() []memberStatus {
				s := append([]memberStatus(nil), base...)
				s[0].Errors = []string{"memberID:10276657743932975437 alarm:NOSPACE "}
				return s
			}(),
			wantReason: "alarm:NOSPACE"},
		{name: "alarm from the alarm list", members: members(base), statuses: base, alarms: []string{"alarm NOSPACE on member 8e9e05c52164694d"},
			wantReason: "alarms raised: alarm NOSPACE on member 8e9e05c52164694d"},
		{name: "five members, three configured, two of them up: quorum lost", statuses: down(base, 2),
			members:    append(members(base), etcdMember{ID: 1, Name: "m4", ClientURLs: []string{"https://m4:2379"}}, etcdMember{ID: 2, Name: "m5", ClientURLs: []string{"https://m5:2379"}}),
			wantReason: "quorum lost: 2 of 5 voting members answer, 3 needed"},
		{name: "a member not among the endpoints is warned about", statuses: base,
			members:     append(members(base), etcdMember{ID: 1, Name: "m4", ClientURLs: []string{"https://m4:2379"}}, etcdMember{ID: 2, Name: "m5", IsLearner: true}),
			wantOK:      true,
			wantWarning: "member m4 (1, https://m4:2379) is not among the configured endpoints: not checked"},
		{name: "member list unreadable: judged over the endpoints", statuses: base, listErr: errors.New("permission denied"), wantOK: true,
			wantWarning: "member list unreadable (permission denied)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := judgeEtcd(tt.members, tt.listErr, tt.statuses, tt.alarms)
			if c.OK != tt.wantOK {
				t.Fatalf("ok=%v, want %v; reason %q\nevidence: %q", c.OK, tt.wantOK, c.Reason, c.Evidence)
			}
			if !strings.Contains(c.Reason, tt.wantReason) {
				t.Errorf("reason %q does not contain %q", c.Reason, tt.wantReason)
			}
			if w := strings.Join(c.Warnings, "\n"); !strings.Contains(w, tt.wantWarning) {
				t.Errorf("warnings %q do not contain %q", w, tt.wantWarning)
			}
			if tt.wantOK && len(tt.statuses) == 3 && tt.statuses[1].Err == "" {
				if !strings.Contains(strings.Join(c.Evidence, "\n"), "version 3.5.4") {
					t.Errorf("evidence lacks member versions: %q", c.Evidence)
				}
			}
		})
	}
}

func TestJudgeCNPG(t *testing.T) {
	load := func() *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(readFixture(t, "cnpg-cluster-get-o-yaml_3-instances-healthy_cnpg-1.28_pg18.yaml"), &u.Object); err != nil {
			t.Fatal(err)
		}
		return u
	}
	set := func(u *unstructured.Unstructured, v any, path ...string) {
		if err := unstructured.SetNestedField(u.Object, v, path...); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name    string
		mutate  func(*unstructured.Unstructured)
		problem string
	}{
		{"healthy fixture", func(*unstructured.Unstructured) {}, ""},
		{"an instance not ready", func(u *unstructured.Unstructured) {
			set(u, int64(2), "status", "readyInstances")
			set(u, "Waiting for the instances to become active", "status", "phase")
		}, `kube-bind-xbrxn-default/cluster-example: 2 of 3 instances ready, phase "Waiting for the instances to become active"`},
		{"switchover in progress", func(u *unstructured.Unstructured) {
			set(u, "cluster-example-2", "status", "targetPrimary")
			set(u, "Switchover in progress", "status", "phase")
		}, `phase "Switchover in progress", switchover in progress (cluster-example-1 → cluster-example-2)`},
		{"no primary", func(u *unstructured.Unstructured) {
			unstructured.RemoveNestedField(u.Object, "status", "currentPrimary")
		}, "no current primary"},
		{"no status at all", func(u *unstructured.Unstructured) { delete(u.Object, "status") },
			`0 of 3 instances ready, phase "", no current primary`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := load()
			tt.mutate(u)
			evidence, problem := judgeCNPG(u)
			if !strings.HasPrefix(evidence, "kube-bind-xbrxn-default/cluster-example: ready ") {
				t.Errorf("evidence %q", evidence)
			}
			if tt.problem == "" && problem != "" || !strings.Contains(problem, tt.problem) {
				t.Errorf("problem %q, want %q", problem, tt.problem)
			}
		})
	}
}
