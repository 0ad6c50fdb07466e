package machine

import (
	"fmt"
	"slices"
	"strings"
)

// AptOp is one package action of an apt transaction.
type AptOp struct {
	Pkg  *Package
	From string // installed version ("" for a new package)
	To   string // version after the transaction ("" for a removal)
	New  bool
}

// AptPlan is what apt-get full-upgrade would do.
type AptPlan struct {
	Remove   []AptOp
	Install  []AptOp // upgrades and new packages, dependencies first
	KeptBack []string
	// Phased are upgrades deferred because they are being phased in
	// (apt prints them in their own section and leaves them out).
	Phased []string
	// Autoremovable are installed packages apt would report as no longer
	// required (before the transaction).
	Autoremovable []string
}

// Upgraded counts upgrades (not new packages).
func (p AptPlan) Upgraded() int {
	n := 0
	for _, op := range p.Install {
		if !op.New {
			n++
		}
	}
	return n
}

// NewCount counts newly installed packages.
func (p AptPlan) NewCount() int { return len(p.Install) - p.Upgraded() }

func hasUpgrade(s *State, p *Package) bool {
	return p.Installed() && p.Candidate != "" && !s.Unavailable(p.Name) && CompareVersions(p.Candidate, p.Version) > 0
}

// PlanFullUpgrade computes apt-get full-upgrade: every installed package
// with a newer candidate is upgraded unless it is held or one of the new
// packages it needs is not in the archive (then it is kept back); new
// dependencies are installed first; packages the archive's new versions
// break (a fault) are removed.
func PlanFullUpgrade(s *State) AptPlan {
	var plan AptPlan
	planned := map[string]bool{}
	var resolve func(name string, need *[]string, seen map[string]bool) bool
	resolve = func(name string, need *[]string, seen map[string]bool) bool {
		if seen[name] {
			return true
		}
		seen[name] = true
		p := s.Packages[name]
		if p == nil {
			return false
		}
		if p.Installed() || planned[name] {
			return true
		}
		if p.Candidate == "" || s.Unavailable(name) {
			return false
		}
		for _, d := range p.Depends {
			if !resolve(d, need, seen) {
				return false
			}
		}
		*need = append(*need, name)
		return true
	}
	for _, p := range s.SortedPackages() {
		if !hasUpgrade(s, p) {
			continue
		}
		if p.Hold {
			plan.KeptBack = append(plan.KeptBack, p.Name)
			continue
		}
		if slices.Contains(s.Faults.Phased, p.Name) {
			plan.Phased = append(plan.Phased, p.Name)
			continue
		}
		var need []string
		ok := true
		seen := map[string]bool{p.Name: true}
		for _, d := range p.Depends {
			if !resolve(d, &need, seen) {
				ok = false
				break
			}
		}
		if !ok {
			plan.KeptBack = append(plan.KeptBack, p.Name)
			continue
		}
		for _, n := range need {
			if planned[n] {
				continue
			}
			planned[n] = true
			np := s.Packages[n]
			plan.Install = append(plan.Install, AptOp{Pkg: np, To: np.Candidate, New: true})
		}
		planned[p.Name] = true
		plan.Install = append(plan.Install, AptOp{Pkg: p, From: p.Version, To: p.Candidate})
	}
	for _, name := range s.Faults.RemoveOnUpgrade {
		if p := s.Packages[name]; p != nil && p.Installed() {
			plan.Remove = append(plan.Remove, AptOp{Pkg: p, From: p.Version})
			plan.Install = slices.DeleteFunc(plan.Install, func(op AptOp) bool { return op.Pkg.Name == name })
		}
	}
	plan.Autoremovable = Autoremovable(s)
	return plan
}

// ProtectedKernels are the kernel ABIs apt never autoremoves: the running
// one, the newest installed and the one before it.
func ProtectedKernels(s *State) []string {
	ks := s.InstalledKernels()
	prot := []string{strings.TrimSuffix(s.Kernel, "-generic")}
	for i := len(ks) - 1; i >= 0 && i >= len(ks)-2; i-- {
		prot = append(prot, ks[i])
	}
	return prot
}

// Autoremovable lists installed, automatically installed kernel packages
// of kernels that are not protected, by name.
func Autoremovable(s *State) []string {
	prot := ProtectedKernels(s)
	var out []string
	for _, p := range s.SortedPackages() {
		if p.Installed() && p.Auto && p.Kernel != "" && !slices.Contains(prot, p.Kernel) {
			out = append(out, p.Name)
		}
	}
	return out
}

// AptList renders one of apt's package blocks ("The following ...:" and
// the names wrapped at 80 columns, two spaces in).
func AptList(title string, names []string, suffix string) string {
	if len(names) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString(title + "\n")
	line := " "
	for _, n := range names {
		n += suffix
		if len(line)+1+len(n) > 79 && line != " " {
			b.WriteString(line + "\n")
			line = " "
		}
		line += " " + n
	}
	b.WriteString(line + "\n")
	return b.String()
}

// SizeString formats a byte count as apt does (SizeToStr, 1000-based).
func SizeString(bytes float64) string {
	units := []string{"B", "kB", "MB", "GB", "TB"}
	for i, u := range units {
		if bytes < 100 && i != 0 {
			return fmt.Sprintf("%.1f %s", bytes, u)
		}
		if bytes < 10000 {
			return fmt.Sprintf("%.0f %s", bytes, u)
		}
		bytes /= 1000
	}
	return fmt.Sprintf("%.0f PB", bytes)
}

// InstLine renders a simulation line for an install or upgrade.
func InstLine(op AptOp) string {
	old := ""
	if op.From != "" {
		old = " [" + op.From + "]"
	}
	return fmt.Sprintf("Inst %s%s (%s %s [%s])", op.Pkg.Name, old, op.To, originOf(op.Pkg), op.Pkg.Arch)
}

// ConfLine renders the configure line of an install or upgrade.
func ConfLine(op AptOp) string {
	return fmt.Sprintf("Conf %s (%s %s [%s])", op.Pkg.Name, op.To, originOf(op.Pkg), op.Pkg.Arch)
}

func originOf(p *Package) string {
	if p.Origin == "" {
		return "Ubuntu:24.04/noble"
	}
	return p.Origin
}

// GetLine renders a download line ("Get:N site name arch version [size]").
func GetLine(n int, p *Package) string {
	size := SizeString(float64(p.SizeKB) * 1000)
	if strings.HasSuffix(p.Site, " ") {
		return fmt.Sprintf("Get:%d %s %s %s [%s]", n, p.Site, p.Name, p.Candidate, size)
	}
	return fmt.Sprintf("Get:%d %s %s %s %s %s [%s]", n, p.Site, p.Arch, p.Name, p.Arch, p.Candidate, size)
}

// DebName is the file name apt gives a downloaded package.
func DebName(p *Package, version string) string {
	return fmt.Sprintf("%s_%s_%s.deb", p.Name, strings.ReplaceAll(version, ":", "%3a"), p.Arch)
}
