package maintainers

import (
	"testing"
	"time"
)

// Which of a node's NodeMaintenances holds it: the oldest, ties by name
// then namespace; one already scheduled keeps it whatever sorts first.
func TestServe(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC)
	t1 := t0.Add(time.Second)
	tests := []struct {
		name string
		ms   []maintenance
		want int
	}{
		{"none", nil, -1},
		{"one", []maintenance{{Name: "a", Created: t0}}, 0},
		{"the oldest", []maintenance{{Name: "a", Created: t1}, {Name: "b", Created: t0}}, 1},
		{"a tie goes by name", []maintenance{{Name: "b", Created: t0}, {Name: "a", Created: t0}}, 1},
		{"then by namespace", []maintenance{{Namespace: "y", Name: "a", Created: t0}, {Namespace: "x", Name: "a", Created: t0}}, 1},
		{"a scheduled one keeps the node", []maintenance{{Name: "a", Created: t0}, {Name: "b", Created: t0, Phase: ReasonScheduled}}, 1},
		{"a Ready one keeps the node", []maintenance{{Name: "a", Created: t0, Phase: ReasonPending}, {Name: "b", Created: t1, Phase: ReasonReady, Finalized: true}}, 1},
		{"Pending is not scheduled", []maintenance{{Name: "b", Created: t0, Phase: ReasonPending}, {Name: "a", Created: t0, Phase: ""}}, 1},
		{"the finalizer alone says scheduled", []maintenance{{Name: "a", Created: t0}, {Name: "b", Created: t1, Finalized: true}}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := serve(tc.ms); got != tc.want {
				t.Fatalf("serve = %d, want %d", got, tc.want)
			}
		})
	}
}
