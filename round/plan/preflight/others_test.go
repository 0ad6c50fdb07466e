package preflight

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/mcp-patch/mcp-patch/kube/actors"
	"github.com/mcp-patch/mcp-patch/round/plan"
)

func TestOthersFacts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		hs      []actors.Holder
		err     error
		want    []plan.OtherHolder
		wantErr string
	}{
		{name: "nobody", want: []plan.OtherHolder{}},
		{name: "a wait and a stop", hs: []actors.Holder{
			{Actor: actors.Kured, Who: "gpu-07", What: "kured reboots gpu-07", Verdict: actors.Wait},
			{Actor: actors.Person, Who: "maintenance", What: "a person tainted the node", Verdict: actors.Stop},
		}, want: []plan.OtherHolder{
			{Actor: "kured", Who: "gpu-07", What: "kured reboots gpu-07"},
			{Actor: "person", Who: "maintenance", What: "a person tainted the node", Stop: true},
		}},
		{name: "the cluster could not say", err: errors.New("read node gpu-1:\n connection refused"), wantErr: "read node gpu-1: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, gotErr := OthersFacts(tc.hs, tc.err)
			if diff := cmp.Diff(tc.want, got); diff != "" || gotErr != tc.wantErr {
				t.Fatalf("holders (-want +got):\n%s\nerror %q, want %q", diff, gotErr, tc.wantErr)
			}
		})
	}
}
