package gate

import "strings"

// Judge is the round's reading of a gate report: the restarts the window
// node's deliberate reboot explains (accepted) are noted on the baseline
// check and not counted; an etcd member that does not answer keeps quorum
// now but would lose it at the next control-plane reboot, so the gate is
// red until every member answers. It answers the report so judged and a
// reason for each red check and each warning. Pure.
func Judge(rep Report, accepted []string) (Report, []string) {
	rep.Checks = append([]Check(nil), rep.Checks...)
	rep.Failed = append([]string(nil), rep.Failed...)
	for i, c := range rep.Checks {
		if c.Name == NameBaseline && len(accepted) > 0 {
			rep.Checks[i].Evidence = append(append([]string(nil), c.Evidence...), "expected with the reboot, not counted: "+strings.Join(accepted, "; "))
		}
		if c.Name == NameEtcd && c.OK && len(c.Warnings) > 0 {
			rep.Checks[i].OK = false
			rep.Checks[i].Reason = "an etcd member is not healthy (" + strings.Join(c.Warnings, "; ") + "): quorum holds now, but the next control-plane reboot would lose it"
			rep.OK = false
			rep.Failed = append(rep.Failed, c.Name)
		}
	}
	var reasons []string
	for _, c := range rep.Checks {
		if !c.OK {
			reasons = append(reasons, c.Name+": "+c.Reason)
		}
		for _, w := range c.Warnings {
			reasons = append(reasons, c.Name+" (warning): "+w)
		}
	}
	return rep, reasons
}
