package intent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// EnvironmentsFile is the file at the intent repository's root that names
// the environments one intent serves (staging, then production). Without it
// the repository has one environment.
const EnvironmentsFile = "environments.yaml"

// Compliance classes of an environment (Environment.Compliance).
const (
	ComplianceInternal       = "internal"
	ComplianceExternalFacing = "external-facing"
)

// Days from a critical fix's publication to it running, by compliance
// class, when compliance_deadline_days is left out.
const (
	DefaultDeadlineDaysInternal       = 14
	DefaultDeadlineDaysExternalFacing = 2
)

// Bounds of the numbers environments.yaml holds.
const (
	MaxComplianceDeadlineDays = 365
	MaxPromotionSoakHours     = 8760 // a year
)

// maxEnvironmentsBytes bounds how much of environments.yaml is read.
const maxEnvironmentsBytes = DefaultMaxDocumentBytes

// Environment is one cluster (or set of clusters) the intent repository's
// rounds run in. Rounds are per environment: each has its own journal,
// kernels and approvals.
type Environment struct {
	// Name is the environment's key in environments.yaml (a DNS-1123 label).
	Name string
	// Kubeconfig is the kubeconfig file of the environment's cluster, as
	// written (a leading ~ is not expanded here); empty: the server's own.
	Kubeconfig string
	// Context is the kubeconfig context; empty: the kubeconfig's current one.
	Context string
	// Inventory is the SSH inventory file, a path relative to the
	// repository's root that stays inside it; empty: the server's own.
	Inventory string
	// Compliance is ComplianceInternal or ComplianceExternalFacing.
	Compliance string
	// ComplianceDeadlineDays is how many days after publication a critical
	// fix must run here (1 to MaxComplianceDeadlineDays); the file may
	// leave it out, and then it holds the compliance class's default.
	ComplianceDeadlineDays int
	// Upstream names the environment a kernel must be proven in before a
	// round here plans it; empty: none (kernels come from the archive).
	Upstream string
	// PromotionSoakHours is how long a kernel must have run upstream, from
	// the upstream round's signed outcome, before it may be planned here
	// (1 to MaxPromotionSoakHours); 0 exactly when Upstream is empty.
	PromotionSoakHours int
}

// PromotionSoak is PromotionSoakHours as a duration; 0 without an upstream.
func (e Environment) PromotionSoak() time.Duration {
	return time.Duration(e.PromotionSoakHours) * time.Hour
}

// Environments are the environments of environments.yaml by name. Nil or
// empty: the repository has one environment and no environments.yaml.
type Environments map[string]Environment

// Names returns the environments' names, sorted.
func (e Environments) Names() []string {
	names := make([]string, 0, len(e))
	for n := range e {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Get returns the environment called name, and false when there is none.
func (e Environments) Get(name string) (Environment, bool) {
	env, ok := e[name]
	return env, ok
}

// Downstream returns the names of the environments whose upstream is name
// (only those directly below it), sorted.
func (e Environments) Downstream(name string) []string {
	if name == "" {
		return nil
	}
	var out []string
	for _, n := range e.Names() {
		if e[n].Upstream == name {
			out = append(out, n)
		}
	}
	return out
}

// Check says whether a server configured for the environment called name
// may serve this repository: the name must be one of its environments, and
// must be empty exactly when the repository defines none.
func (e Environments) Check(name string) error {
	defined := strings.Join(e.Names(), ", ")
	switch {
	case len(e) == 0 && name == "":
		return nil
	case len(e) == 0:
		return fmt.Errorf("environment %q is set in the config, but this repository has no %s (it has one environment): leave environment out of the config, or define %q in %s", name, EnvironmentsFile, name, EnvironmentsFile)
	case name == "":
		return fmt.Errorf("this repository defines environments (%s): set environment in the config", defined)
	}
	if _, ok := e[name]; !ok {
		return fmt.Errorf("environment %q is not defined in this repository's %s (defined: %s): set environment in the config to one of them", name, EnvironmentsFile, defined)
	}
	return nil
}

// LoadEnvironments reads environments.yaml at the root of the repository in
// repoDir. A missing file means no environments (nil, no error); a file that
// is not a regular file inside the root, or is malformed, is an error.
func LoadEnvironments(repoDir string) (Environments, error) {
	root, err := os.OpenRoot(repoDir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", EnvironmentsFile, err)
	}
	defer root.Close()
	fi, err := root.Lstat(EnvironmentsFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", EnvironmentsFile, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("read %s: %w: not a regular file (a link or a folder)", EnvironmentsFile, ErrInvalid)
	}
	f, err := root.Open(EnvironmentsFile)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", EnvironmentsFile, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxEnvironmentsBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", EnvironmentsFile, err)
	}
	if len(data) > maxEnvironmentsBytes {
		return nil, fmt.Errorf("read %s: %w: larger than %d bytes", EnvironmentsFile, ErrInvalid, maxEnvironmentsBytes)
	}
	return ParseEnvironments(data)
}

// environmentsDoc is environments.yaml as written: pointers tell a number
// left out (its default) from one written as 0 (an error).
type environmentsDoc struct {
	Environments map[string]environmentDoc `json:"environments"`
}

type environmentDoc struct {
	Kubeconfig             string `json:"kubeconfig,omitempty"`
	Context                string `json:"context,omitempty"`
	Inventory              string `json:"inventory,omitempty"`
	Compliance             string `json:"compliance"`
	ComplianceDeadlineDays *int   `json:"compliance_deadline_days,omitempty"`
	Upstream               string `json:"upstream,omitempty"`
	PromotionSoakHours     *int   `json:"promotion_soak_hours,omitempty"`
}

// ParseEnvironments decodes environments.yaml strictly (an unknown key is
// an error), validates it and fills in the default deadlines. The error
// (wrapping ErrMalformed) lists every problem, each naming the environment
// and the field.
func ParseEnvironments(data []byte) (Environments, error) {
	// Each environment is decoded on its own, so that an unknown key is
	// reported with the environment it is in.
	var raw struct {
		Environments map[string]json.RawMessage `json:"environments"`
	}
	if err := yaml.UnmarshalStrict(data, &raw); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrMalformed, EnvironmentsFile, err)
	}
	doc := environmentsDoc{Environments: make(map[string]environmentDoc, len(raw.Environments))}
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(raw.Environments)) {
		var d environmentDoc
		dec := json.NewDecoder(bytes.NewReader(raw.Environments[name]))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&d); err != nil {
			errs = append(errs, fmt.Errorf("environments.%s: %w", name, err))
			continue
		}
		doc.Environments[name] = d
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %s: %w", ErrMalformed, EnvironmentsFile, errors.Join(errs...))
	}
	if errs := doc.validate(); len(errs) > 0 {
		return nil, fmt.Errorf("%w: %s: %w", ErrMalformed, EnvironmentsFile, errors.Join(errs...))
	}
	out := make(Environments, len(doc.Environments))
	for name, d := range doc.Environments {
		env := Environment{Name: name, Kubeconfig: d.Kubeconfig, Context: d.Context, Inventory: d.Inventory,
			Compliance: d.Compliance, Upstream: d.Upstream, ComplianceDeadlineDays: defaultDeadlineDays(d.Compliance)}
		if d.ComplianceDeadlineDays != nil {
			env.ComplianceDeadlineDays = *d.ComplianceDeadlineDays
		}
		if d.PromotionSoakHours != nil {
			env.PromotionSoakHours = *d.PromotionSoakHours
		}
		out[name] = env
	}
	return out, nil
}

func defaultDeadlineDays(compliance string) int {
	if compliance == ComplianceExternalFacing {
		return DefaultDeadlineDaysExternalFacing
	}
	return DefaultDeadlineDaysInternal
}

// validate returns every problem of the file, in the order of the
// environments' names.
func (doc environmentsDoc) validate() []error {
	if len(doc.Environments) == 0 {
		return []error{fmt.Errorf("environments: is empty; a repository with one environment has no %s", EnvironmentsFile)}
	}
	var errs []error
	names := make([]string, 0, len(doc.Environments))
	for n := range doc.Environments {
		names = append(names, n)
	}
	slices.Sort(names)
	defined := strings.Join(names, ", ")
	for _, name := range names {
		d := doc.Environments[name]
		bad := func(field, format string, args ...any) {
			errs = append(errs, fmt.Errorf("environments.%s.%s: %s", name, field, fmt.Sprintf(format, args...)))
		}
		if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("environments.%s: %q is not an environment name (a DNS-1123 label): %s", name, name, strings.Join(msgs, "; ")))
		}
		switch d.Compliance {
		case ComplianceInternal, ComplianceExternalFacing:
		case "":
			bad("compliance", "is missing, want %q or %q", ComplianceInternal, ComplianceExternalFacing)
		default:
			bad("compliance", "is %q, want %q or %q", d.Compliance, ComplianceInternal, ComplianceExternalFacing)
		}
		if v := d.ComplianceDeadlineDays; v != nil && (*v < 1 || *v > MaxComplianceDeadlineDays) {
			bad("compliance_deadline_days", "is %d, want 1-%d", *v, MaxComplianceDeadlineDays)
		}
		if d.Inventory != "" && !insideRepo(d.Inventory) {
			bad("inventory", "%q is not a path inside the repository (relative, without '..' leading out)", d.Inventory)
		}
		for _, f := range [][2]string{{"kubeconfig", d.Kubeconfig}, {"context", d.Context}, {"inventory", d.Inventory}} {
			if strings.TrimSpace(f[1]) != f[1] {
				bad(f[0], "%q has space around it", f[1])
			}
		}
		switch {
		case d.Upstream == "":
		case d.Upstream == name:
			bad("upstream", "names the environment itself; want another environment (%s)", defined)
		default:
			if _, ok := doc.Environments[d.Upstream]; !ok {
				bad("upstream", "%q is not an environment of this file (%s)", d.Upstream, defined)
			}
		}
		switch v := d.PromotionSoakHours; {
		case d.Upstream != "" && v == nil:
			bad("promotion_soak_hours", "is missing; an environment with an upstream needs it (1-%d)", MaxPromotionSoakHours)
		case d.Upstream == "" && v != nil:
			bad("promotion_soak_hours", "is set without upstream; it is how long a kernel runs upstream before it may be planned here")
		case v != nil && (*v < 1 || *v > MaxPromotionSoakHours):
			bad("promotion_soak_hours", "is %d, want 1-%d", *v, MaxPromotionSoakHours)
		}
	}
	for _, cycle := range upstreamCycles(doc.Environments, names) {
		errs = append(errs, fmt.Errorf("environments.%s.upstream: the upstream chain goes round in a circle: %s", cycle[0], strings.Join(cycle, " → ")))
	}
	return errs
}

// upstreamCycles returns each circle of two or more environments in the
// upstream chains once, starting and ending at its first name in sorted
// order (a → b → a). An environment naming itself is reported by validate.
func upstreamCycles(envs map[string]environmentDoc, sortedNames []string) [][]string {
	var out [][]string
	reported := map[string]bool{}
	for _, start := range sortedNames {
		if reported[start] {
			continue
		}
		seen := map[string]bool{}
		var chain []string
		for n := start; n != ""; n = envs[n].Upstream {
			if _, ok := envs[n]; !ok || seen[n] {
				break
			}
			seen[n] = true
			chain = append(chain, n)
		}
		// The chain went round only when its last environment's upstream
		// is start itself; a chain that runs into another circle is that
		// circle's, reported from its own first name.
		last := chain[len(chain)-1]
		if len(chain) < 2 || envs[last].Upstream != start {
			continue
		}
		for _, n := range chain {
			reported[n] = true
		}
		out = append(out, append(chain, start))
	}
	return out
}

// insideRepo says whether p is a relative path that stays inside the
// directory it is relative to.
func insideRepo(p string) bool {
	return !path.IsAbs(p) && !filepath.IsAbs(p) && filepath.IsLocal(filepath.FromSlash(p))
}

// Of names the environment round id belongs to ("<env>-<month>"): the
// longest environment name that prefixes it, "" when none does.
func (e Environments) Of(roundID string) string {
	best := ""
	for n := range e {
		if strings.HasPrefix(roundID, n+"-") && len(n) > len(best) {
			best = n
		}
	}
	return best
}

// MarkEnvironments sets each lesson's Environment from its round (Of).
func (e Environments) MarkEnvironments(c *Component) {
	if c == nil || len(e) == 0 {
		return
	}
	for i := range c.Lessons {
		c.Lessons[i].Environment = e.Of(c.Lessons[i].Round)
	}
}
