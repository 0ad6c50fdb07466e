package steps

import (
	"context"
	"fmt"
)

// Fallback drill actions (fallback_drill.sh).
const (
	DrillArm    = "arm"
	DrillDisarm = "disarm"
	DrillStatus = "status"
)

// DrillState is whether the fallback drill is armed on a node and whether
// it fired (the trial kernel crashed on purpose).
type DrillState struct {
	Node        string `json:"node"`
	Armed       bool   `json:"armed"`
	DrillKernel string `json:"drill_kernel"`
	Unit        string `json:"unit"`
	Fired       bool   `json:"fired"`
	FiredAt     string `json:"fired_at,omitempty"`
}

// FallbackDrill arms, disarms or reads the one-shot crash of the trial
// kernel that proves GRUB falls back to the old kernel (fallback_drill.sh).
// Arming needs the round and the kernel that must crash.
func (s *Steps) FallbackDrill(ctx context.Context, node, action, round, kernel string) (DrillState, error) {
	st := DrillState{Node: node}
	switch action {
	case DrillArm:
		if err := ValidateRound(round); err != nil {
			return st, fmt.Errorf("fallback drill on node %s: %w", node, err)
		}
		if err := ValidateKernel("drill kernel", kernel); err != nil {
			return st, fmt.Errorf("fallback drill on node %s: %w", node, err)
		}
	case DrillDisarm, DrillStatus:
	default:
		return st, fmt.Errorf("fallback drill on node %s: %w: action %q", node, ErrBadInput, action)
	}
	env := map[string]string{"ACTION": action}
	if action == DrillArm {
		env["ROUND"], env["DRILL_KERNEL"] = round, kernel
	}
	var o struct {
		Armed   bool   `json:"armed"`
		Kernel  string `json:"drill_kernel"`
		Unit    string `json:"unit"`
		Fired   bool   `json:"fired"`
		FiredAt string `json:"fired_at"`
	}
	_, err := s.run(ctx, "fallback_drill", node, env, &o, false)
	st.Armed, st.DrillKernel, st.Unit, st.Fired, st.FiredAt = o.Armed, o.Kernel, o.Unit, o.Fired, o.FiredAt
	return st, err
}
