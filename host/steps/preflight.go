package steps

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Preflight reads what the reviewed plan needs from a node in one SSH
// session (preflight.sh): the simulated upgrade, as Simulate returns it,
// and the survey Inspect returns for the plan's target kernel. It runs one
// dpkg-query, one apt-mark and one `apt-get -s full-upgrade` for both, and
// changes nothing on the node.
//
// Its errors are Simulate's (ErrRefused when dpkg was interrupted, with
// DpkgInterrupted and FixCommand set) and Inspect's (a target kernel that
// is not a kernel release is ErrBadInput).
func (s *Steps) Preflight(ctx context.Context, node string) (Simulation, Inspection, error) {
	var so simulateOut
	var survey inspectOut
	var po struct {
		Modules []string `json:"plan_kernel_modules"`
	}
	if _, err := s.run(ctx, "preflight", node, nil, &decodeAll{&so, &survey, &po}, false); err != nil {
		return Simulation{Node: node, DpkgInterrupted: so.Interrupt, FixCommand: so.FixCommand}, Inspection{}, err
	}
	sim, err := simulationOf(node, so)
	if err != nil {
		return sim, Inspection{}, fmt.Errorf("preflight on node %s: %w", node, err)
	}
	target := sim.Plan.TargetKernel
	if target != "" {
		if err := ValidateKernel("target kernel", target); err != nil {
			return sim, Inspection{}, fmt.Errorf("preflight on node %s: %w", node, err)
		}
	}
	// The survey's own simulation is the one above.
	survey.AptSimulate, survey.AptSimulateExit = so.AptOutput, 0
	survey.TargetMods = modulesFor(target, po.Modules)
	return sim, inspectionOf(node, target, survey), nil
}

// modulesFor picks the module paths of release from preflight.sh's
// "<release>\t<path>" lines.
func modulesFor(release string, lines []string) []string {
	out := []string{}
	if release == "" {
		return out
	}
	for _, l := range lines {
		if rel, path, ok := strings.Cut(l, "\t"); ok && rel == release && path != "" {
			out = append(out, path)
		}
	}
	return out
}

// decodeAll decodes one JSON object into each of its values.
type decodeAll []any

func (d decodeAll) UnmarshalJSON(b []byte) error {
	for _, v := range d {
		if err := json.Unmarshal(b, v); err != nil {
			return err
		}
	}
	return nil
}
