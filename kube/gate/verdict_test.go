package gate

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestJudge(t *testing.T) {
	green := func(name string) Check { return Check{Name: name, OK: true} }
	cases := []struct {
		name        string
		rep         Report
		accepted    []string
		wantOK      bool
		wantFailed  []string
		wantReasons []string
		wantEvid    []string // the baseline check's evidence
	}{
		{name: "all green", rep: Report{OK: true, Checks: []Check{green(NameEtcd), green(NameBaseline)}}, wantOK: true},
		{name: "an etcd member down keeps the gate red",
			rep:    Report{OK: true, Checks: []Check{{Name: NameEtcd, OK: true, Warnings: []string{"etcd-2 unreachable"}}, green(NameBaseline)}},
			wantOK: false, wantFailed: []string{NameEtcd},
			wantReasons: []string{"etcd: an etcd member is not healthy (etcd-2 unreachable): quorum holds now, but the next control-plane reboot would lose it",
				"etcd (warning): etcd-2 unreachable"}},
		{name: "restarts the reboot explains are noted, not counted",
			rep:      Report{OK: true, Checks: []Check{green(NameEtcd), {Name: NameBaseline, OK: true, Evidence: []string{"no new failures"}}}},
			accepted: []string{"ml/trainer-0 restarted 1 time(s) on gpu-1"}, wantOK: true,
			wantEvid: []string{"no new failures", "expected with the reboot, not counted: ml/trainer-0 restarted 1 time(s) on gpu-1"}},
		{name: "a red check is a reason",
			rep:    Report{OK: false, Failed: []string{"postgres"}, Checks: []Check{{Name: "postgres", Reason: "pg-1 not ready"}}},
			wantOK: false, wantFailed: []string{"postgres"}, wantReasons: []string{"postgres: pg-1 not ready"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := cmp.Diff(Report{}, c.rep)
			got, reasons := Judge(c.rep, c.accepted)
			if got.OK != c.wantOK || !cmp.Equal(got.Failed, c.wantFailed) || !cmp.Equal(reasons, c.wantReasons) {
				t.Fatalf("Judge: ok %v failed %v reasons %q; want %v %v %q", got.OK, got.Failed, reasons, c.wantOK, c.wantFailed, c.wantReasons)
			}
			for _, ch := range got.Checks {
				if ch.Name == NameBaseline && c.wantEvid != nil && !cmp.Equal(ch.Evidence, c.wantEvid) {
					t.Errorf("baseline evidence %q, want %q", ch.Evidence, c.wantEvid)
				}
			}
			if after := cmp.Diff(Report{}, c.rep); after != before {
				t.Errorf("Judge changed the report it was given:\n%s", after)
			}
		})
	}
}
