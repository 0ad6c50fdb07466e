package plan

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Who else maintains a node at plan time is information, listed on the
// node: never a blocker, never in a digest; a hold that would stop the
// round at the cordon is also a risk.
func TestOthersAreInformation(t *testing.T) {
	base := Build(input(PerStep))
	for _, tc := range []struct {
		name      string
		others    []OtherHolder
		err       string
		want      []string
		riskWords string
	}{
		{name: "nobody"},
		{name: "a driver upgrade under way", others: []OtherHolder{{Actor: "gpu-operator", Who: "nvidia.com/gpu-driver-upgrade-state=upgrade-required", What: "the driver upgrade is under way"}},
			want: []string{"gpu-operator (nvidia.com/gpu-driver-upgrade-state=upgrade-required): the driver upgrade is under way"}},
		{name: "a person's cordon", others: []OtherHolder{{Actor: "person", Who: "cordon", What: "a person cordoned the node", Stop: true}},
			want: []string{"person (cordon): a person cordoned the node"}, riskWords: "a person must look if it still does at the cordon: person (cordon)"},
		{name: "the cluster could not say", err: "connection refused", want: []string{"could not tell who else maintains the node: connection refused"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := input(PerStep)
			f := in.Facts["cp-1"]
			f.Others, f.OthersErr = tc.others, tc.err
			in.Facts["cp-1"] = f
			fl := Build(in)
			n, _ := fl.Node("cp-1")
			if diff := cmp.Diff(tc.want, n.Others); diff != "" {
				t.Fatalf("others (-want +got):\n%s", diff)
			}
			if !fl.Ready() || fl.Digest != base.Digest {
				t.Fatalf("the others changed the plan: ready %v, digest %s (was %s), blockers %v", fl.Ready(), fl.Digest, base.Digest, fl.Blockers)
			}
			risks := strings.Join(n.Risks, "\n")
			if tc.riskWords == "" && strings.Contains(risks, "another party") || !strings.Contains(risks, tc.riskWords) {
				t.Fatalf("risks %q, want %q", risks, tc.riskWords)
			}
			var md bytes.Buffer
			if err := Markdown(&md, fl); err != nil {
				t.Fatal(err)
			}
			if len(tc.want) > 0 && !strings.Contains(md.String(), "others maintaining it at plan time (looked at again before each cordon): "+tc.want[0]) {
				t.Fatalf("plan.md does not list the others:\n%s", md.String())
			}
		})
	}
}
