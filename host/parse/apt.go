package parse

import (
	"crypto/sha256"
	"encoding/hex"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// AptAction is one Inst, Conf, Remv or Purg line of `apt-get -s` output.
type AptAction struct {
	// Op is "Inst", "Conf", "Remv" or "Purg".
	Op      string `json:"op"`
	Package string `json:"package"`
	// OldVersion is the installed version (the "[...]" after the name);
	// empty for a new package.
	OldVersion string `json:"old_version,omitempty"`
	// NewVersion is the version to be installed or configured; empty for
	// removals.
	NewVersion string `json:"new_version,omitempty"`
	// Origins are the archives offering NewVersion, e.g.
	// "Ubuntu:22.04/jammy-security".
	Origins []string `json:"origins,omitempty"`
	Arch    string   `json:"arch,omitempty"`
}

// AptCounts is the summary line ("1 upgraded, 7 newly installed, ...") or,
// with apt 3, the "Summary:" block. A count apt did not print is zero.
type AptCounts struct {
	Upgraded       int `json:"upgraded"`
	NewlyInstalled int `json:"newly_installed"`
	Downgraded     int `json:"downgraded"`
	ToRemove       int `json:"to_remove"`
	NotUpgraded    int `json:"not_upgraded"`
	// Found is false when no summary was seen at all.
	Found bool `json:"found"`
}

// AptSimulation is what `apt-get -s` (or -d, or a real run's header) says
// it will do.
type AptSimulation struct {
	// Actions are the Inst/Conf/Remv/Purg lines in the order printed.
	Actions []AptAction `json:"actions"`
	// The package lists of the human-readable sections.
	New        []string `json:"new"`
	Upgraded   []string `json:"upgraded"`
	Removed    []string `json:"removed"`
	Downgraded []string `json:"downgraded"`
	KeptBack   []string `json:"kept_back"`
	// Phased are upgrades apt defers because they are being phased in
	// (Phased-Update-Percentage): kept back by phasing, neither a removal
	// nor a failure; a later round gets them.
	Phased      []string  `json:"phased"`
	HeldChanged []string  `json:"held_changed"`
	Additional  []string  `json:"additional"`
	Counts      AptCounts `json:"counts"`
	// NotFullyInstalled is "N not fully installed or removed." (dpkg left
	// something half-done).
	NotFullyInstalled int `json:"not_fully_installed"`
}

// Removals are the Remv and Purg actions.
func (s AptSimulation) Removals() []AptAction {
	var out []AptAction
	for _, a := range s.Actions {
		if a.Op == "Remv" || a.Op == "Purg" {
			out = append(out, a)
		}
	}
	return out
}

// Installs are the Inst actions (new packages and upgrades).
func (s AptSimulation) Installs() []AptAction {
	var out []AptAction
	for _, a := range s.Actions {
		if a.Op == "Inst" {
			out = append(out, a)
		}
	}
	return out
}

var (
	aptSections = map[string]string{
		"The following NEW packages will be installed:":             "new",
		"The following packages will be upgraded:":                  "upgraded",
		"The following packages will be REMOVED:":                   "removed",
		"The following packages will be DOWNGRADED:":                "downgraded",
		"The following packages have been kept back:":               "kept_back",
		"The following upgrades have been deferred due to phasing:": "phased",
		"The following held packages will be changed:":              "held_changed",
		"The following extra packages will be installed:":           "additional",
		"The following additional packages will be installed:":      "additional",
		// apt 3 layout.
		"Installing:":                       "new",
		"Installing dependencies:":          "new",
		"Upgrading:":                        "upgraded",
		"REMOVING:":                         "removed",
		"DOWNGRADING:":                      "downgraded",
		"Not upgrading:":                    "kept_back",
		"Not upgrading yet due to phasing:": "phased",
		"Changing held packages:":           "held_changed",
	}
	aptSummary      = regexp.MustCompile(`^(\d+) upgraded, (\d+) newly installed, (?:(\d+) downgraded, )?(\d+) to remove and (\d+) not upgraded\.`)
	aptSummary3     = regexp.MustCompile(`(Upgrading|Installing|Downgrading|Removing|Not Upgrading): (\d+)`)
	aptNotFully     = regexp.MustCompile(`^(\d+) not fully installed or removed\.`)
	debPackageToken = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]*(:[a-z0-9-]+)?$`)
)

// ParseAptSimulate reads `apt-get -s` output (old and apt 3 layouts; the
// NOTE banner, prompts and other lines are skipped). It never fails: text it
// does not know is ignored.
func ParseAptSimulate(out string) AptSimulation {
	var s AptSimulation
	section := ""
	for _, raw := range strings.Split(out, "\n") {
		line := strings.TrimRight(raw, " \t\r")
		if section != "" {
			if line != "" && (line[0] == ' ' || line[0] == '\t') {
				for _, tok := range strings.Fields(line) {
					if debPackageToken.MatchString(tok) {
						s.addToSection(section, tok)
					}
				}
				continue
			}
			section = ""
		}
		if name, ok := aptSections[line]; ok {
			section = name
			continue
		}
		trimmed := strings.TrimLeft(line, " \t")
		if m := aptSummary.FindStringSubmatch(trimmed); m != nil {
			s.Counts = AptCounts{
				Upgraded: atoi(m[1]), NewlyInstalled: atoi(m[2]), Downgraded: atoi(m[3]),
				ToRemove: atoi(m[4]), NotUpgraded: atoi(m[5]), Found: true,
			}
			continue
		}
		if strings.HasPrefix(trimmed, "Upgrading: ") || strings.HasPrefix(trimmed, "Installing: ") {
			if ms := aptSummary3.FindAllStringSubmatch(trimmed, -1); len(ms) > 1 {
				c := AptCounts{Found: true}
				for _, m := range ms {
					n := atoi(m[2])
					switch m[1] {
					case "Upgrading":
						c.Upgraded = n
					case "Installing":
						c.NewlyInstalled = n
					case "Downgrading":
						c.Downgraded = n
					case "Removing":
						c.ToRemove = n
					case "Not Upgrading":
						c.NotUpgraded = n
					}
				}
				s.Counts = c
				continue
			}
		}
		if m := aptNotFully.FindStringSubmatch(trimmed); m != nil {
			s.NotFullyInstalled = atoi(m[1])
			continue
		}
		if a, ok := parseAptAction(line); ok {
			s.Actions = append(s.Actions, a)
		}
	}
	return s
}

func (s *AptSimulation) addToSection(section, pkg string) {
	switch section {
	case "new":
		s.New = append(s.New, pkg)
	case "upgraded":
		s.Upgraded = append(s.Upgraded, pkg)
	case "removed":
		s.Removed = append(s.Removed, pkg)
	case "downgraded":
		s.Downgraded = append(s.Downgraded, pkg)
	case "kept_back":
		s.KeptBack = append(s.KeptBack, pkg)
	case "phased":
		s.Phased = append(s.Phased, pkg)
	case "held_changed":
		s.HeldChanged = append(s.HeldChanged, pkg)
	case "additional":
		s.Additional = append(s.Additional, pkg)
	}
}

// aptFields splits a line the way the scripts' awk does with
// FS='[ \t]+' after stripping leading blanks: on runs of spaces and tabs
// only, keeping an empty last field when the line ends in blanks.
func aptFields(line string) []string {
	line = strings.TrimLeft(line, " \t")
	var out []string
	start := 0
	for i := 0; i < len(line); {
		if line[i] == ' ' || line[i] == '\t' {
			out = append(out, line[start:i])
			for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
				i++
			}
			start = i
			continue
		}
		i++
	}
	return append(out, line[start:])
}

// planParts is the core shared by PlanLines and parseAptAction; it mirrors
// plan_lines in scripts/host/simulate.sh and install.sh exactly.
func planParts(f []string) (old, newV, arch string, newAt, archAt int) {
	old, newV, arch = "-", "-", "-"
	newAt, archAt = -1, -1
	i := 2
	if i < len(f) && len(f[i]) >= 2 && f[i][0] == '[' && f[i][len(f[i])-1] == ']' {
		old = f[i][1 : len(f[i])-1]
		i++
	}
	for ; i < len(f); i++ {
		if strings.HasPrefix(f[i], "(") {
			newV = f[i][1:]
			newAt = i
			i++
			break
		}
	}
	for ; i < len(f); i++ {
		if len(f[i]) >= 3 && f[i][0] == '[' && strings.HasSuffix(f[i], "])") {
			arch = f[i][1 : len(f[i])-2]
			archAt = i
			break
		}
	}
	if old == "" {
		old = "-"
	}
	if newV == "" {
		newV = "-"
	}
	if arch == "" {
		arch = "-"
	}
	return old, newV, arch, newAt, archAt
}

func isPlanOp(op string) bool { return op == "Inst" || op == "Remv" || op == "Purg" }

func parseAptAction(line string) (AptAction, bool) {
	f := aptFields(line)
	if len(f) < 2 || (!isPlanOp(f[0]) && f[0] != "Conf") || f[1] == "" {
		return AptAction{}, false
	}
	old, newV, arch, newAt, archAt := planParts(f)
	a := AptAction{Op: f[0], Package: f[1]}
	if old != "-" {
		a.OldVersion = old
	}
	if newV != "-" {
		a.NewVersion = newV
	}
	if arch != "-" {
		a.Arch = arch
	}
	if newAt >= 0 && archAt > newAt+1 {
		for _, o := range strings.Split(strings.Join(f[newAt+1:archAt], " "), ", ") {
			if o = strings.TrimSpace(o); o != "" {
				a.Origins = append(a.Origins, o)
			}
		}
	}
	return a, true
}

// PlanLines returns the canonical package set of `apt-get -s` output: one
// "<op> <package> <old> <new> <arch>" line per Inst, Remv and Purg line
// ("-" for a missing part), sorted bytewise. It is exactly what plan_lines
// | LC_ALL=C sort prints in scripts/host/simulate.sh.
func PlanLines(out string) []string {
	var lines []string
	for _, raw := range strings.Split(out, "\n") {
		f := aptFields(raw)
		if !isPlanOp(f[0]) {
			continue
		}
		name := ""
		if len(f) > 1 {
			name = f[1]
		}
		old, newV, arch, _, _ := planParts(f)
		lines = append(lines, f[0]+" "+name+" "+old+" "+newV+" "+arch)
	}
	sort.Strings(lines)
	return lines
}

// PlanDigest is "sha256:" and the hex sha256 of PlanLines, each line ending
// in "\n" — the digest the scripts compute and install.sh checks.
func PlanDigest(out string) string {
	return DigestPlanLines(PlanLines(out))
}

// DigestPlanLines digests already canonical, sorted plan lines.
func DigestPlanLines(lines []string) string {
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l))
		h.Write([]byte{'\n'})
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// AptFetch is one "Get:" line of an apt download.
type AptFetch struct {
	Package string `json:"package"`
	Version string `json:"version"`
	Arch    string `json:"arch,omitempty"`
	URI     string `json:"uri"`
	Size    string `json:"size,omitempty"`
}

// AptDownload is what `apt-get -d` reported.
type AptDownload struct {
	Fetched []AptFetch `json:"fetched"`
	// NeedToGet is the "Need to get X/Y of archives." figure, as printed.
	NeedToGet string `json:"need_to_get,omitempty"`
	// FetchedTotal is the "Fetched X in Ys" figure, as printed.
	FetchedTotal string `json:"fetched_total,omitempty"`
	// Complete is true when apt said "Download complete and in download only mode".
	Complete bool `json:"complete"`
}

var (
	aptArchs     = map[string]bool{"all": true, "amd64": true, "arm64": true, "armhf": true, "armel": true, "i386": true, "ppc64el": true, "s390x": true, "riscv64": true, "mips64el": true}
	aptNeedToGet = regexp.MustCompile(`^Need to get (.+) of archives\.`)
	aptFetched   = regexp.MustCompile(`^Fetched (.+)$`)
)

// ParseAptDownload reads the output of `apt-get -d -y full-upgrade`.
func ParseAptDownload(out string) AptDownload {
	var d AptDownload
	for _, raw := range strings.Split(out, "\n") {
		line := strings.TrimSpace(raw)
		switch {
		case strings.HasPrefix(line, "Get:"):
			if f, ok := parseAptGet(line); ok {
				d.Fetched = append(d.Fetched, f)
			}
		case strings.HasPrefix(line, "Download complete and in download only mode"):
			d.Complete = true
		default:
			if m := aptNeedToGet.FindStringSubmatch(line); m != nil {
				d.NeedToGet = m[1]
			} else if m := aptFetched.FindStringSubmatch(line); m != nil {
				d.FetchedTotal = m[1]
			}
		}
	}
	return d
}

func parseAptGet(line string) (AptFetch, bool) {
	size := ""
	if i := strings.LastIndex(line, " ["); i >= 0 && strings.HasSuffix(line, "]") {
		size = line[i+2 : len(line)-1]
		line = line[:i]
	}
	t := strings.Fields(line)
	// Get:N URI DIST [ARCH] PACKAGE [ARCH] VERSION
	if len(t) < 5 {
		return AptFetch{}, false
	}
	f := AptFetch{URI: t[1], Version: t[len(t)-1], Size: size}
	if len(t) >= 6 && aptArchs[t[len(t)-2]] {
		f.Arch = t[len(t)-2]
		f.Package = t[len(t)-3]
	} else {
		f.Package = t[len(t)-2]
	}
	return f, true
}

// DpkgPackage is one line of
// dpkg-query -W -f='${Package}\t${Version}\t${db:Status-Abbrev}\n'.
type DpkgPackage struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Status is dpkg's abbreviation, e.g. "ii", "hi", "rc", "iU".
	Status string `json:"status"`
	// Installed is true when the package is fully installed.
	Installed bool `json:"installed"`
	// Held is true when the selection is "hold" (apt-mark hold).
	Held bool `json:"held"`
}

// ParseDpkgQuery reads the tab-separated lines the scripts ask dpkg-query
// for. Lines that do not have three fields are skipped.
func ParseDpkgQuery(out string) []DpkgPackage {
	var pkgs []DpkgPackage
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(strings.TrimRight(line, "\r"), "\t")
		if len(f) != 3 || f[0] == "" {
			continue
		}
		st := strings.TrimSpace(f[2])
		p := DpkgPackage{Name: f[0], Version: f[1], Status: st}
		if len(st) >= 2 {
			p.Installed = st[1] == 'i'
			p.Held = st[0] == 'h'
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// Lines returns the non-empty, space-trimmed lines of out (e.g. the output
// of apt-mark showhold).
func Lines(out string) []string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0
	}
	return n
}
