package drain

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDigestStable(t *testing.T) {
	pods := []PodRef{
		{Namespace: "ml", Name: "train-0", OwnerKind: "StatefulSet", OwnerName: "train"},
		{Namespace: "db", Name: "pg-1", OwnerKind: "Cluster", OwnerName: "pg", EmptyDir: true},
		{Namespace: "ml", Name: "api-7c9-x", OwnerKind: "ReplicaSet", OwnerName: "api-7c9"},
	}
	reversed := []PodRef{pods[2], pods[1], pods[0]}
	base := Digest("gpu-03", Policy{DeleteEmptyDirData: true}, pods, nil)
	if !strings.HasPrefix(base, "sha256:") || len(base) != len("sha256:")+64 {
		t.Fatalf("digest %q is not sha256:<64 hex>", base)
	}
	tests := []struct {
		name     string
		node     string
		policy   Policy
		pods     []PodRef
		blockers []string
		same     bool
	}{
		{"same input", "gpu-03", Policy{DeleteEmptyDirData: true}, pods, nil, true},
		{"order does not matter", "gpu-03", Policy{DeleteEmptyDirData: true}, reversed, nil, true},
		{"another node", "gpu-04", Policy{DeleteEmptyDirData: true}, pods, nil, false},
		{"another policy", "gpu-03", Policy{}, pods, nil, false},
		{"grace period override", "gpu-03", Policy{DeleteEmptyDirData: true, GracePeriodSeconds: 30}, pods, nil, false},
		{"a pod fewer", "gpu-03", Policy{DeleteEmptyDirData: true}, pods[:2], nil, false},
		{"a pod recreated under another name", "gpu-03", Policy{DeleteEmptyDirData: true},
			[]PodRef{pods[0], pods[1], {Namespace: "ml", Name: "api-7c9-y", OwnerKind: "ReplicaSet", OwnerName: "api-7c9"}}, nil, false},
		{"another owner", "gpu-03", Policy{DeleteEmptyDirData: true},
			[]PodRef{pods[0], pods[1], {Namespace: "ml", Name: "api-7c9-x", OwnerKind: "ReplicaSet", OwnerName: "api-8d0"}}, nil, false},
		{"a blocker", "gpu-03", Policy{DeleteEmptyDirData: true}, pods, []string{"cannot delete Pods that declare no controller: ml/x"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Digest(tt.node, tt.policy, tt.pods, tt.blockers)
			if (got == base) != tt.same {
				t.Errorf("Digest = %s, base %s; want same=%v", got, base, tt.same)
			}
		})
	}
	// Digest must not reorder the caller's slice.
	if d := cmp.Diff([]PodRef{pods[2], pods[1], pods[0]}, reversed); d != "" {
		t.Errorf("Digest changed its input (-want +got):\n%s", d)
	}
}

func TestOwnerRoundTrip(t *testing.T) {
	tests := []struct {
		name    string
		owner   Owner
		wantErr bool
	}{
		{"plain", Owner{Identity: "mcp-patch@ops-1", Round: "2025-07"}, false},
		{"with slashes and colons", Owner{Identity: "ops-1/4242", Round: "round:2025-07-a"}, false},
		{"empty identity", Owner{Round: "2025-07"}, true},
		{"empty round", Owner{Identity: "ops-1"}, true},
		{"separator in identity", Owner{Identity: "a,round=evil", Round: "r"}, true},
		{"space in round", Owner{Identity: "ops-1", Round: "2025 07"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.owner.Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Validate = %v, wantErr %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			got, err := ParseOwner(tt.owner.String())
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.owner, got); d != "" {
				t.Errorf("round trip (-want +got):\n%s", d)
			}
		})
	}
	if _, err := ParseOwner("someone else"); err == nil {
		t.Error("ParseOwner accepted a foreign value")
	}
}

func TestStateDescribe(t *testing.T) {
	o := &Owner{Identity: "ops-1", Round: "2025-07"}
	tests := []struct {
		name  string
		state State
		want  string
	}{
		{"not cordoned", State{}, "not cordoned"},
		{"stale record", State{Owner: o, CordonedAt: "2025-07-01T10:00:00Z"},
			"not cordoned (stale record: cordoned by identity=ops-1,round=2025-07 at 2025-07-01T10:00:00Z)"},
		{"ours", State{Unschedulable: true, Owner: o, CordonedAt: "2025-07-01T10:00:00Z"},
			"cordoned by identity=ops-1,round=2025-07 at 2025-07-01T10:00:00Z"},
		{"a person", State{Unschedulable: true}, "cordoned by someone else (no mcp-patch record: a person or another tool)"},
		{"garbled record", State{Unschedulable: true, RawCordonedBy: "bob", CordonedAt: "yesterday"},
			`cordoned with an unreadable record "bob" at yesterday`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.state.Describe(); got != tt.want {
				t.Errorf("Describe = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRefusalError(t *testing.T) {
	var err error = &RefusalError{Node: "gpu-03", Kind: RefuseForeign, Reason: "cordoned by someone else"}
	if !errors.Is(err, ErrRefused) {
		t.Error("RefusalError is not ErrRefused")
	}
	if got, want := err.Error(), "uncordon node gpu-03: refused: cordoned by someone else"; got != want {
		t.Errorf("Error = %q, want %q", got, want)
	}
}

func TestOptionsDefaults(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		wantErr string
	}{
		{"retry delay zero becomes 2s", Options{Round: "r", Identity: "i"}, ""},
		{"negative retry delay", Options{Round: "r", Identity: "i", EvictRetryDelay: -1}, "evict retry delay"},
		{"negative timeout", Options{Round: "r", Identity: "i", Timeout: -1}, "timeout"},
		{"no identity", Options{Round: "r"}, "identity"},
		{"negative grace", Options{Round: "r", Identity: "i", Policy: Policy{GracePeriodSeconds: -5}}, "grace period"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := tt.opts
			err := o.defaults()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if o.EvictRetryDelay <= 0 || o.Timeout <= 0 {
					t.Errorf("defaults left retry delay %v, timeout %v", o.EvictRetryDelay, o.Timeout)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("defaults = %v, want error about %s", err, tt.wantErr)
			}
		})
	}
}
