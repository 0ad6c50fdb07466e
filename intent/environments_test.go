package intent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

const goodEnvironments = `environments:
  staging:
    kubeconfig: ~/.kube/staging.yaml
    context: staging
    inventory: inventory-staging.yaml
    compliance: internal
  production-a:
    context: prod-a
    compliance: external-facing
    upstream: staging
    promotion_soak_hours: 168
  production-b:
    compliance: external-facing
    compliance_deadline_days: 7
    inventory: inventories/production-b.yaml
    upstream: production-a
    promotion_soak_hours: 24
`

func TestParseEnvironments(t *testing.T) {
	got, err := ParseEnvironments([]byte(goodEnvironments))
	if err != nil {
		t.Fatal(err)
	}
	want := Environments{
		"staging": {Name: "staging", Kubeconfig: "~/.kube/staging.yaml", Context: "staging", Inventory: "inventory-staging.yaml",
			Compliance: ComplianceInternal, ComplianceDeadlineDays: DefaultDeadlineDaysInternal},
		"production-a": {Name: "production-a", Context: "prod-a", Compliance: ComplianceExternalFacing,
			ComplianceDeadlineDays: DefaultDeadlineDaysExternalFacing, Upstream: "staging", PromotionSoakHours: 168},
		"production-b": {Name: "production-b", Compliance: ComplianceExternalFacing, ComplianceDeadlineDays: 7,
			Inventory: "inventories/production-b.yaml", Upstream: "production-a", PromotionSoakHours: 24},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ParseEnvironments (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"production-a", "production-b", "staging"}, got.Names()); diff != "" {
		t.Errorf("Names (-want +got):\n%s", diff)
	}
	if d := got["production-a"].PromotionSoak(); d != 168*time.Hour {
		t.Errorf("production-a PromotionSoak = %s, want 168h", d)
	}
	if d := got["staging"].PromotionSoak(); d != 0 {
		t.Errorf("staging PromotionSoak = %s, want 0", d)
	}
	if env, ok := got.Get("production-b"); !ok || env.Upstream != "production-a" {
		t.Errorf("Get(production-b) = %+v, %v", env, ok)
	}
	if env, ok := got.Get("production"); ok {
		t.Errorf("Get(production) = %+v, want none", env)
	}
}

func TestEnvironmentsDownstream(t *testing.T) {
	envs := Environments{
		"staging":      {Name: "staging"},
		"production-b": {Name: "production-b", Upstream: "staging"},
		"production-a": {Name: "production-a", Upstream: "staging"},
		"edge":         {Name: "edge", Upstream: "production-a"},
	}
	for _, tt := range []struct {
		name string
		want []string
	}{
		{"staging", []string{"production-a", "production-b"}},
		{"production-a", []string{"edge"}},
		{"edge", nil},
		{"unknown", nil},
		{"", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, envs.Downstream(tt.name)); diff != "" {
				t.Errorf("Downstream(%q) (-want +got):\n%s", tt.name, diff)
			}
		})
	}
}

// One rule per case: each bad file must be refused with an error naming the
// environment and the field, and each good one accepted.
func TestParseEnvironmentsRules(t *testing.T) {
	for _, tt := range []struct {
		name string
		yaml string
		want []string // parts of the error; none: valid
	}{
		{name: "one environment", yaml: "environments:\n  staging:\n    compliance: internal\n"},
		{name: "deadline at its bounds", yaml: "environments:\n  a:\n    compliance: internal\n    compliance_deadline_days: 1\n  b:\n    compliance: internal\n    compliance_deadline_days: 365\n"},
		{name: "soak at its bounds", yaml: "environments:\n  a:\n    compliance: internal\n  b:\n    compliance: internal\n    upstream: a\n    promotion_soak_hours: 1\n  c:\n    compliance: internal\n    upstream: a\n    promotion_soak_hours: 8760\n"},
		{name: "inventory in a folder", yaml: "environments:\n  a:\n    compliance: internal\n    inventory: inventories/./a.yaml\n"},

		{name: "unknown field", yaml: "environments:\n  a:\n    compliance: internal\n    soak_hours: 3\n",
			want: []string{`environments.a: json: unknown field "soak_hours"`}},
		{name: "name is not read from the body", yaml: "environments:\n  a:\n    name: b\n    compliance: internal\n",
			want: []string{`environments.a: json: unknown field "name"`}},
		{name: "unknown fields in two environments", yaml: "environments:\n  a:\n    compliance: internal\n    soak_hours: 3\n  b:\n    compliance: internal\n    cluster: b\n",
			want: []string{`environments.a: json: unknown field "soak_hours"`, `environments.b: json: unknown field "cluster"`}},
		{name: "a number that is not one", yaml: "environments:\n  a:\n    compliance: internal\n    compliance_deadline_days: two weeks\n",
			want: []string{"environments.a: json: cannot unmarshal string", "compliance_deadline_days"}},
		{name: "unknown top-level key", yaml: "environment:\n  a:\n    compliance: internal\n",
			want: []string{`unknown field "environment"`}},
		{name: "duplicate environment", yaml: "environments:\n  a:\n    compliance: internal\n  a:\n    compliance: internal\n",
			want: []string{`"a" already set`}},
		{name: "empty file", yaml: "", want: []string{"environments: is empty"}},
		{name: "no environments", yaml: "environments: {}\n", want: []string{"environments: is empty"}},
		{name: "name upper case", yaml: "environments:\n  Staging:\n    compliance: internal\n",
			want: []string{`environments.Staging: "Staging" is not an environment name`}},
		{name: "name with a dot", yaml: "environments:\n  prod.a:\n    compliance: internal\n",
			want: []string{`environments.prod.a: "prod.a" is not an environment name`}},
		{name: "name too long", yaml: "environments:\n  " + strings.Repeat("a", 64) + ":\n    compliance: internal\n",
			want: []string{"is not an environment name", "63"}},
		{name: "compliance missing", yaml: "environments:\n  a:\n    context: a\n",
			want: []string{`environments.a.compliance: is missing, want "internal" or "external-facing"`}},
		{name: "compliance unknown", yaml: "environments:\n  a:\n    compliance: external_facing\n",
			want: []string{`environments.a.compliance: is "external_facing", want "internal" or "external-facing"`}},
		{name: "deadline zero", yaml: "environments:\n  a:\n    compliance: internal\n    compliance_deadline_days: 0\n",
			want: []string{"environments.a.compliance_deadline_days: is 0, want 1-365"}},
		{name: "deadline over a year", yaml: "environments:\n  a:\n    compliance: internal\n    compliance_deadline_days: 366\n",
			want: []string{"environments.a.compliance_deadline_days: is 366, want 1-365"}},
		{name: "upstream unknown", yaml: "environments:\n  a:\n    compliance: internal\n    upstream: stagin\n    promotion_soak_hours: 1\n",
			want: []string{`environments.a.upstream: "stagin" is not an environment of this file (a)`}},
		{name: "upstream itself", yaml: "environments:\n  a:\n    compliance: internal\n    upstream: a\n    promotion_soak_hours: 1\n",
			want: []string{"environments.a.upstream: names the environment itself"}},
		{name: "upstream circle of two", yaml: "environments:\n  a:\n    compliance: internal\n    upstream: b\n    promotion_soak_hours: 1\n  b:\n    compliance: internal\n    upstream: a\n    promotion_soak_hours: 1\n",
			want: []string{"environments.a.upstream: the upstream chain goes round in a circle: a → b → a"}},
		{name: "upstream circle of three with a tail", yaml: "environments:\n  a:\n    compliance: internal\n    upstream: c\n    promotion_soak_hours: 1\n  b:\n    compliance: internal\n    upstream: a\n    promotion_soak_hours: 1\n  c:\n    compliance: internal\n    upstream: b\n    promotion_soak_hours: 1\n  d:\n    compliance: internal\n    upstream: a\n    promotion_soak_hours: 1\n",
			want: []string{"environments.a.upstream: the upstream chain goes round in a circle: a → c → b → a"}},
		{name: "soak missing with upstream", yaml: "environments:\n  a:\n    compliance: internal\n  b:\n    compliance: internal\n    upstream: a\n",
			want: []string{"environments.b.promotion_soak_hours: is missing; an environment with an upstream needs it (1-8760)"}},
		{name: "soak without upstream", yaml: "environments:\n  a:\n    compliance: internal\n    promotion_soak_hours: 24\n",
			want: []string{"environments.a.promotion_soak_hours: is set without upstream"}},
		{name: "soak zero", yaml: "environments:\n  a:\n    compliance: internal\n  b:\n    compliance: internal\n    upstream: a\n    promotion_soak_hours: 0\n",
			want: []string{"environments.b.promotion_soak_hours: is 0, want 1-8760"}},
		{name: "soak over a year", yaml: "environments:\n  a:\n    compliance: internal\n  b:\n    compliance: internal\n    upstream: a\n    promotion_soak_hours: 8761\n",
			want: []string{"environments.b.promotion_soak_hours: is 8761, want 1-8760"}},
		{name: "inventory absolute", yaml: "environments:\n  a:\n    compliance: internal\n    inventory: /etc/inventory.yaml\n",
			want: []string{`environments.a.inventory: "/etc/inventory.yaml" is not a path inside the repository`}},
		{name: "inventory escapes", yaml: "environments:\n  a:\n    compliance: internal\n    inventory: ../inventory.yaml\n",
			want: []string{`environments.a.inventory: "../inventory.yaml" is not a path inside the repository`}},
		{name: "inventory escapes from a folder", yaml: "environments:\n  a:\n    compliance: internal\n    inventory: inventories/../../x.yaml\n",
			want: []string{`environments.a.inventory: "inventories/../../x.yaml" is not a path inside the repository`}},
		{name: "context with space around it", yaml: "environments:\n  a:\n    compliance: internal\n    context: \" prod\"\n",
			want: []string{`environments.a.context: " prod" has space around it`}},
		{name: "every problem at once", yaml: "environments:\n  a:\n    compliance: public\n    compliance_deadline_days: 0\n  b:\n    compliance: internal\n    upstream: c\n",
			want: []string{"environments.a.compliance:", "environments.a.compliance_deadline_days:", "environments.b.upstream:", "environments.b.promotion_soak_hours:"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			envs, err := ParseEnvironments([]byte(tt.yaml))
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("ParseEnvironments: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseEnvironments = %v, want an error containing %q", envs, tt.want)
			}
			if !errors.Is(err, ErrMalformed) {
				t.Errorf("error %v does not wrap ErrMalformed", err)
			}
			if envs != nil {
				t.Errorf("ParseEnvironments returned %v with its error", envs)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
		})
	}
}

// A circle is reported once, whichever environment the walk starts from.
func TestParseEnvironmentsCircleReportedOnce(t *testing.T) {
	_, err := ParseEnvironments([]byte("environments:\n  a:\n    compliance: internal\n    upstream: b\n    promotion_soak_hours: 1\n  b:\n    compliance: internal\n    upstream: a\n    promotion_soak_hours: 1\n"))
	if n := strings.Count(err.Error(), "circle"); n != 1 {
		t.Errorf("error %q reports %d circles, want 1", err, n)
	}
}

func TestLoadEnvironments(t *testing.T) {
	for _, tt := range []struct {
		name    string
		setup   func(t *testing.T, dir string)
		want    []string // names; nil: none
		wantErr string
	}{
		{name: "no file: one environment", setup: func(*testing.T, string) {}},
		{name: "good file", setup: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, EnvironmentsFile), goodEnvironments)
		}, want: []string{"production-a", "production-b", "staging"}},
		{name: "unknown field refused", setup: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, EnvironmentsFile), "environments:\n  a:\n    compliance: internal\n    cluster: x\n")
		}, wantErr: `environments.a: json: unknown field "cluster"`},
		{name: "invalid file refused", setup: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, EnvironmentsFile), "environments:\n  a:\n    compliance: secret\n")
		}, wantErr: `environments.a.compliance: is "secret"`},
		{name: "a link refused", setup: func(t *testing.T, dir string) {
			other := filepath.Join(t.TempDir(), "elsewhere.yaml")
			writeFile(t, other, goodEnvironments)
			if err := os.Symlink(other, filepath.Join(dir, EnvironmentsFile)); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "environments.yaml: invalid input: not a regular file"},
		{name: "a folder refused", setup: func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, EnvironmentsFile), 0o755); err != nil {
				t.Fatal(err)
			}
		}, wantErr: "not a regular file"},
		{name: "too large refused", setup: func(t *testing.T, dir string) {
			writeFile(t, filepath.Join(dir, EnvironmentsFile), goodEnvironments+"#"+strings.Repeat("x", maxEnvironmentsBytes)+"\n")
		}, wantErr: "larger than"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			tt.setup(t, dir)
			envs, err := LoadEnvironments(dir)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("LoadEnvironments = %v, %v; want an error containing %q", envs, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadEnvironments: %v", err)
			}
			if diff := cmp.Diff(tt.want, envs.Names(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
		})
	}
}

func TestLoadEnvironmentsMissingRepo(t *testing.T) {
	if _, err := LoadEnvironments(filepath.Join(t.TempDir(), "absent")); err == nil {
		t.Error("LoadEnvironments of a missing repository: no error")
	}
}

func TestEnvironmentsCheck(t *testing.T) {
	two := Environments{"staging": {Name: "staging"}, "production": {Name: "production", Upstream: "staging"}}
	for _, tt := range []struct {
		name string
		envs Environments
		env  string
		want string // "": allowed
	}{
		{name: "one environment, none configured", envs: nil},
		{name: "empty map, none configured", envs: Environments{}},
		{name: "a defined environment", envs: two, env: "production"},
		{name: "environments, none configured", envs: two,
			want: "this repository defines environments (production, staging): set environment in the config"},
		{name: "an undefined environment", envs: two, env: "prod",
			want: `environment "prod" is not defined in this repository's environments.yaml (defined: production, staging)`},
		{name: "one environment, one configured", envs: nil, env: "staging",
			want: `environment "staging" is set in the config, but this repository has no environments.yaml`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.envs.Check(tt.env)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Check(%q): %v", tt.env, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Check(%q) = %v, want an error containing %q", tt.env, err, tt.want)
			}
		})
	}
}

// The sample intent repository's environments.yaml is valid.
func TestExampleEnvironments(t *testing.T) {
	envs, err := LoadEnvironments(examplesDir)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"production", "staging"}, envs.Names()); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if p := envs["production"]; p.Upstream != "staging" || p.PromotionSoakHours != 168 || p.Compliance != ComplianceExternalFacing {
		t.Errorf("production = %+v", p)
	}
}

func TestEnvironmentsOf(t *testing.T) {
	envs := Environments{"prod": {Name: "prod"}, "prod-eu": {Name: "prod-eu"}, "staging": {Name: "staging"}}
	for id, want := range map[string]string{"prod-2026-11": "prod", "prod-eu-2026-11": "prod-eu", "staging-2026-11": "staging",
		"2026-11": "", "stagingx-2026-11": "", "prod": ""} {
		if got := envs.Of(id); got != want {
			t.Errorf("Of(%q) = %q, want %q", id, got, want)
		}
	}
	c := &Component{Lessons: []Lesson{{Round: "staging-2026-10"}, {Round: "2025-10"}}}
	envs.MarkEnvironments(c)
	if c.Lessons[0].Environment != "staging" || c.Lessons[1].Environment != "" {
		t.Errorf("marked %+v", c.Lessons)
	}
}
