package intent

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestComponentsOfTheExampleRepo(t *testing.T) {
	r := openRepo(t, newExampleRepo(t), nil)
	got, err := r.Components()
	if err != nil {
		t.Fatal(err)
	}
	type line struct {
		Name      string
		IDs       []string
		Questions int
		Lessons   int
		Docs      int
		Problems  []string
	}
	var lines []line
	for _, c := range got {
		lines = append(lines, line{c.Name, c.PropertyIDs, c.OpenQuestions, c.Lessons, len(c.Documents), c.Problems})
	}
	want := []line{
		{"admission-webhook", []string{"P1", "P2", "P3", "P4"}, 0, 1, 6, []string{}},
		{"control-plane", []string{"P1", "P2", "P3", "P4", "P5"}, 0, 1, 6, []string{}},
		{"gpu-fleet", []string{"P1", "P2", "P3", "P4", "P5", "P6", "P7"}, 0, 2, 6, []string{}},
		{"os-layer", []string{"P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "P9", "P10", "P11"}, 1, 2, 6, []string{}},
		{"postgres", []string{"P1", "P2", "P3", "P4"}, 0, 0, 6, []string{}},
	}
	if diff := cmp.Diff(want, lines); diff != "" {
		t.Errorf("components (-want +got):\n%s", diff)
	}
}

func TestOSLayerComponent(t *testing.T) {
	r := openRepo(t, newExampleRepo(t), nil)
	c, err := r.Component("os-layer")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Problems) != 0 {
		t.Fatalf("problems: %v", c.Problems)
	}
	in := c.Intent
	if in.Title != "os-layer — Ubuntu, apt, kernel and GRUB on every node" {
		t.Errorf("title %q", in.Title)
	}
	if !strings.HasPrefix(in.Why, "Kernel and userland security fixes") || !strings.Contains(in.Why, "\n\nThe round is run by an agent") {
		t.Errorf("why: %q", in.Why)
	}
	titles := map[string]string{}
	for _, p := range in.Properties {
		titles[p.ID] = p.Title
	}
	wantTitles := map[string]string{
		"P1": "Kernel upgrades are deliberate", "P2": "One node at a time",
		"P3": "Each node's checks are green before the next", "P4": "The old kernel stays one reboot away",
		"P5": "A full-upgrade removes nothing", "P6": "Cluster packages are held",
		"P7": "A fleet-wide kernel-consistency check closes the round", "P8": "Autoremove waits for the soak",
		"P9": "Security fixes land within the compliance deadline", "P10": "Every step leaves a record", "P11": "Others that maintain a node are respected",
	}
	if diff := cmp.Diff(wantTitles, titles); diff != "" {
		t.Errorf("property titles (-want +got):\n%s", diff)
	}
	if p := in.Properties[5]; !strings.Contains(p.Text, "`containerd`, `kubelet`, `kubeadm`, `kubectl` and `cri-tools` are on hold") {
		t.Errorf("P6 text lines not joined: %q", p.Text)
	}
	if len(in.OutOfScope) != 4 || !strings.HasPrefix(in.OutOfScope[0], "Kubernetes version upgrades") {
		t.Errorf("out of scope: %q", in.OutOfScope)
	}
	wantQ := []OpenQuestion{{ID: "Q1", Property: "P1", Date: "2025-11-12", Round: "2025-11"}}
	gotQ := make([]OpenQuestion, len(in.OpenQuestions))
	for i, q := range in.OpenQuestions {
		gotQ[i] = OpenQuestion{ID: q.ID, Property: q.Property, Date: q.Date, Round: q.Round}
		if !strings.Contains(q.Text, "`patchState: nothing-to-apply`") {
			t.Errorf("question text: %q", q.Text)
		}
	}
	if diff := cmp.Diff(wantQ, gotQ); diff != "" {
		t.Errorf("open questions (-want +got):\n%s", diff)
	}

	k := c.Settings.Kernel
	if k == nil || c.Settings.Drain == nil || c.Settings.Node == nil || c.Settings.StackHealth == nil {
		t.Fatalf("os-layer settings sections: %v", c.Settings.Sections())
	}
	if diff := cmp.Diff(KernelSettings{SoakHours: 48, HeldPackages: []string{"containerd", "kubelet", "kubeadm", "kubectl", "cri-tools"},
		ComplianceDeadlineDays: ComplianceDeadlines{Internal: 14, ExternalFacing: 2},
		ExternalFacingLabel:    "platform.example.com/exposure=external", PanicRebootSeconds: 10}, *k); diff != "" {
		t.Errorf("kernel settings (-want +got):\n%s", diff)
	}
	if c.Settings.Node.Sysctls["kernel.panic"] != "10" || c.Settings.Node.Bonds["bond0"].MinActiveSlaves != 2 {
		t.Errorf("node settings: %+v", c.Settings.Node)
	}
	if c.Settings.Drain.EmptyDirPolicy != EmptyDirDelete {
		t.Errorf("drain: %+v", c.Settings.Drain)
	}

	wantLessons := []Lesson{{Date: "2025-09-17", Round: "2025-09", Property: "P5"}, {Date: "2025-10-09", Round: "2025-10", Property: "P4"}}
	var gotLessons []Lesson
	for _, l := range c.Lessons {
		gotLessons = append(gotLessons, Lesson{Date: l.Date, Round: l.Round, Property: l.Property})
	}
	if diff := cmp.Diff(wantLessons, gotLessons); diff != "" {
		t.Errorf("lessons (-want +got):\n%s", diff)
	}
	var docs []string
	for _, d := range c.Documents {
		docs = append(docs, d.URI+" "+d.MIMEType)
		if d.Text == "" || d.Truncated {
			t.Errorf("%s: empty or truncated", d.URI)
		}
	}
	want := []string{
		"intent://os-layer/intent.md text/markdown", "intent://os-layer/runbook.md text/markdown",
		"intent://os-layer/changelog.md text/markdown", "intent://os-layer/verify.sh text/x-shellscript",
		"intent://os-layer/lessons.md text/markdown", "intent://os-layer/settings.yaml application/yaml",
	}
	if diff := cmp.Diff(want, docs); diff != "" {
		t.Errorf("documents (-want +got):\n%s", diff)
	}
}

func TestRoundSettings(t *testing.T) {
	dir := newExampleRepo(t)
	r := openRepo(t, dir, nil)
	s, err := r.RoundSettings()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"kernel", "node", "drain", "stack_health", "control_plane", "postgres", "webhook", "gpu", "approvals"}, s.Sections()); diff != "" {
		t.Errorf("sections (-want +got):\n%s", diff)
	}
	if s.GPU.ExpectedGPUsPerServer != 8 || s.GPU.RDMADevices != 8 || s.GPU.CanaryLabel != "platform.example.com/patch-canary=true" ||
		s.GPU.ModelEndpoint.URL != "http://llm-smoke.inference.svc.cluster.local:8000/v1/completions" {
		t.Errorf("gpu settings: %+v", s.GPU)
	}
	if s.ControlPlane.VIPLease != (ObjectRef{Namespace: "kube-system", Name: "plndr-cp-lock"}) || s.Postgres.Cluster != "platform-pg" {
		t.Errorf("control plane %+v, postgres %+v", s.ControlPlane, s.Postgres)
	}

	// A section owned by two components is refused, naming both.
	f, err := os.OpenFile(filepath.Join(dir, "gpu-fleet", "settings.yaml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("drain:\n  emptydir_policy: refuse\n  timeout_minutes: 5\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = r.RoundSettings()
	if err == nil || !strings.Contains(err.Error(), `section "drain" is set by both gpu-fleet and os-layer`) &&
		!strings.Contains(err.Error(), `section "drain" is set by both os-layer and gpu-fleet`) {
		t.Errorf("want a duplicate-section error, got %v", err)
	}
}

func TestParseSettingsRefusals(t *testing.T) {
	tests := []struct {
		name, yaml, want string
	}{
		{"unknown key", "kernel:\n  soak_hour: 48\n", `unknown field "soak_hour"`},
		{"unknown section", "kernal: {}\n", `unknown field "kernal"`},
		{"soak zero", "kernel:\n  soak_hours: 0\n  held_packages: [kubelet]\n  compliance_deadline_days: {internal: 14, external_facing: 2}\n  panic_reboot_seconds: 10\n", "kernel.soak_hours: is 0, want at least 1"},
		{"bad package", "kernel:\n  soak_hours: 48\n  held_packages: [Kubelet]\n  compliance_deadline_days: {internal: 14, external_facing: 2}\n  panic_reboot_seconds: 10\n", `"Kubelet" is not a Debian package name`},
		{"emptydir policy", "drain:\n  emptydir_policy: maybe\n  timeout_minutes: 5\n", `drain.emptydir_policy: is "maybe"`},
		{"even etcd", "control_plane:\n  node_label: a\n  etcd_members: 4\n  api_vip: 10.0.0.1\n  api_port: 6443\n  vip_lease: {namespace: kube-system, name: x}\n  oidc: {issuer_url: 'https://x', client_id: k}\n", "want an odd number of at least 3"},
		{"http issuer", "control_plane:\n  node_label: a\n  etcd_members: 3\n  api_vip: 10.0.0.1\n  api_port: 6443\n  vip_lease: {namespace: kube-system, name: x}\n  oidc: {issuer_url: 'http://x', client_id: k}\n", "is not an https URL"},
		{"bad selector", "gpu:\n  node_label: 'a b'\n  expected_gpus_per_server: 8\n  driver_branch: '550'\n  canary_label: c=d\n  model_endpoint: {url: 'http://m/v1/completions', model: m, prompt: p, max_tokens: 1, timeout_seconds: 1}\n", "gpu.node_label"},
		{"precompiled without registry", "gpu:\n  node_label: a=b\n  expected_gpus_per_server: 8\n  driver_branch: '550'\n  canary_label: c=d\n  model_endpoint: {url: 'http://m/v1/completions', model: m, prompt: p, max_tokens: 1, timeout_seconds: 1}\n  driver_container: {node_label: nvidia.com/gpu.deploy.driver=true, precompiled: true, repository: nvidia/driver, os_tag: ubuntu22.04, namespace: gpu-operator, pod_label: app=nvidia-driver-daemonset, ready_timeout_seconds: 600}\n",
			"gpu.driver_container.registry: is empty"},
		{"driver pod label", "gpu:\n  node_label: a=b\n  expected_gpus_per_server: 8\n  driver_branch: '550'\n  canary_label: c=d\n  model_endpoint: {url: 'http://m/v1/completions', model: m, prompt: p, max_tokens: 1, timeout_seconds: 1}\n  driver_container: {node_label: a=b, namespace: gpu-operator, pod_label: 'app in (', ready_timeout_seconds: 600}\n",
			"gpu.driver_container.pod_label"},
		{"driver wait", "gpu:\n  node_label: a=b\n  expected_gpus_per_server: 8\n  driver_branch: '550'\n  canary_label: c=d\n  model_endpoint: {url: 'http://m/v1/completions', model: m, prompt: p, max_tokens: 1, timeout_seconds: 1}\n  driver_container: {node_label: a=b, namespace: gpu-operator, pod_label: app=d, ready_timeout_seconds: 0}\n",
			"gpu.driver_container.ready_timeout_seconds: is 0"},
		{"requestor id", "other_actors:\n  wait_minutes: 30\n  requestor_id: 'mcp patch'\n", `other_actors.requestor_id: "mcp patch" is not a DNS-style requestor id`},
		{"no wait", "other_actors:\n  wait_minutes: 0\n", "other_actors.wait_minutes: is 0"},
		{"kured daemonset", "other_actors:\n  wait_minutes: 30\n  kured: {namespace: kube-system, daemonset: 'Kured!'}\n", "other_actors.kured.daemonset"},
		{"approval size", "approvals:\n  gpu_servers: per_node\n", `approvals.gpu_servers: is "per_node", want "per_step" or "per_window"`},
		{"principal pattern", "approvals:\n  principals:\n    control_plane: ['*@example.com']\n", `approvals.principals.control_plane: "*@example.com" is not a principal name`},
		{"negated principal", "approvals:\n  principals:\n    fleet: ['!mallory@example.com']\n", `approvals.principals.fleet: "!mallory@example.com" is not a principal name`},
		{"no principals", "approvals:\n  principals:\n    gpu_servers: []\n", "approvals.principals.gpu_servers: is empty"},
		{"principal twice", "approvals:\n  principals:\n    other_nodes: [a@x, a@x]\n", `approvals.principals.other_nodes: "a@x" is listed twice`},
		{"unknown step kind", "approvals:\n  principals:\n    control_planes: [a@x]\n", `unknown field "control_planes"`},
		{"not yaml", "kernel: [\n", "settings.yaml"},
		{"unknown zone", "maintenance:\n  estimated_window_minutes: 60\n  windows:\n  - {days: [sat], start: '22:00', end: '04:00', time_zone: Europe/Atlantis}\n",
			`maintenance.windows[0].time_zone: "Europe/Atlantis" is not an IANA time zone`},
		{"overlapping windows", "maintenance:\n  estimated_window_minutes: 60\n  windows:\n  - {days: [sat], start: '20:00', end: '23:00', time_zone: UTC}\n  - {days: [sat], start: '22:00', end: '23:30', time_zone: UTC}\n",
			"maintenance.windows[0] and windows[1] overlap"},
		{"empty window", "maintenance:\n  estimated_window_minutes: 60\n  windows:\n  - {days: [sat], start: '22:00', end: '22:00', time_zone: UTC}\n",
			"the window is empty"},
		{"jobs selector", "drain:\n  emptydir_policy: delete\n  timeout_minutes: 5\n  wait_for_jobs: {selector: 'a b', max_wait_minutes: 60}\n", "drain.wait_for_jobs.selector"},
		{"jobs wait", "drain:\n  emptydir_policy: delete\n  timeout_minutes: 5\n  wait_for_jobs: {selector: 'workload-class=training', max_wait_minutes: 0}\n", "drain.wait_for_jobs.max_wait_minutes: is 0"},
		{"alert selector", "alerts:\n  selector: 'severity in (critical'\n", "alerts.selector"},
		{"alert regexp", "alerts:\n  allow: ['Watchdog(']\n", `alerts.allow: "Watchdog(" is not a regular expression`},
		{"expected alert without name", "alerts:\n  expected:\n  - {any_node: true}\n", "alerts.expected[0].alertname"},
		{"no windows", "maintenance:\n  estimated_window_minutes: 60\n  windows: []\n", "maintenance.windows: is empty"},
		{"estimate longer than any window", "maintenance:\n  estimated_window_minutes: 300\n  windows:\n  - {days: [sat], start: '22:00', end: '02:00', time_zone: UTC}\n",
			"longer than the longest window (4h0m0s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseSettings([]byte(tt.yaml))
			if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want ErrMalformed containing %q", err, tt.want)
			}
		})
	}
}

// The principals the intent requires per kind of step: a kind left out
// needs none.
func TestParseApprovalPrincipals(t *testing.T) {
	s, err := ParseSettings([]byte("approvals:\n  gpu_servers: per_window\n  principals:\n    control_plane: [alice@example.com, \"bob smith@example.com\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := s.Approvals.Principals
	if got, ok := p.For(StepsControlPlane); !ok || !slices.Equal(got, []string{"alice@example.com", "bob smith@example.com"}) {
		t.Errorf("control_plane: %q %v", got, ok)
	}
	for _, k := range []string{StepsGPUServers, StepsOtherNodes, StepsFleet} {
		if got, ok := p.For(k); ok {
			t.Errorf("%s: %q, want none required", k, got)
		}
	}
	var none *StepPrincipals
	if _, ok := none.For(StepsControlPlane); ok {
		t.Error("no principals section requires some")
	}
}

func TestParseAlertSettings(t *testing.T) {
	s, err := ParseSettings([]byte("alerts:\n  selector: 'severity in (critical,warning)'\n  allow: [Watchdog, 'Info.*']\n" +
		"  expected:\n  - {alertname: 'KubeNodeNotReady'}\n  - {alertname: etcdMembersDown, any_node: true, control_plane_only: true}\n" +
		"  node_labels: [kubernetes_node]\n  silence_node: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Alerts.Rules()
	if err != nil || len(r.Allow) != 2 || len(r.Expected) != 2 || !r.Expected[1].ControlPlaneOnly || s.Alerts.SilenceLabel() != "kubernetes_node" {
		t.Fatalf("rules %+v %v", r, err)
	}
	if !r.Allow[1].MatchString("InfoInhibitor") || r.Allow[0].MatchString("WatchdogX") {
		t.Error("alertname patterns must match whole names")
	}
	var none *AlertSettings
	if r, err := none.Rules(); err != nil || len(r.Expected) == 0 || none.SilenceLabel() != "node" {
		t.Fatalf("defaults %+v %v", r, err)
	}
}

func TestParseMaintenanceSettings(t *testing.T) {
	s, err := ParseSettings([]byte("maintenance:\n  estimated_window_minutes: 90\n  windows:\n" +
		"  - {days: [tue, thu], start: '22:00', end: '04:00', time_zone: Europe/Berlin}\n" +
		"  - {days: [sat], start: '10:00', end: '14:00', time_zone: America/New_York}\n"))
	if err != nil {
		t.Fatal(err)
	}
	sched, err := s.Maintenance.Schedule()
	if err != nil || len(sched.Windows) != 2 || s.Maintenance.Estimate() != 90*time.Minute {
		t.Fatalf("schedule %+v, estimate %s, err %v", sched, s.Maintenance.Estimate(), err)
	}
	if diff := cmp.Diff([]string{"maintenance"}, s.Sections()); diff != "" {
		t.Errorf("sections (-want +got):\n%s", diff)
	}
	var none *MaintenanceSettings
	if sched, err := none.Schedule(); err != nil || sched.Restricted() {
		t.Fatalf("no maintenance section must not restrict: %+v %v", sched, err)
	}
}

func TestDocumentsAndURIs(t *testing.T) {
	dir := newExampleRepo(t)
	r := openRepo(t, dir, nil)
	refs, err := r.Documents()
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 30 {
		t.Errorf("%d documents, want 30 (5 components × 6)", len(refs))
	}
	for _, ref := range refs {
		c, n, err := ParseURI(ref.URI)
		if err != nil || c != ref.Component || n != ref.Name {
			t.Errorf("ParseURI(%q) = %q, %q, %v", ref.URI, c, n, err)
		}
		d, err := r.Document(c, n)
		if err != nil || int64(len(d.Text)) != ref.Size {
			t.Errorf("Document(%s, %s): %d bytes, %v; listed %d", c, n, len(d.Text), err, ref.Size)
		}
	}

	small := openRepo(t, dir, func(o *Options) { o.MaxDocumentBytes = 100 })
	d, err := small.Document("os-layer", "intent.md")
	if err != nil || !d.Truncated || len(d.Text) > 100 || d.Size <= 100 {
		t.Errorf("truncated document: truncated=%v len=%d size=%d err=%v", d.Truncated, len(d.Text), d.Size, err)
	}

	bad := []struct {
		name, component, doc string
		want                 error
	}{
		{"traversal component", "../x", "intent.md", ErrInvalid},
		{"dotted component", "os-layer/..", "intent.md", ErrInvalid},
		{"upper-case component", "OS-layer", "intent.md", ErrInvalid},
		{"unknown component", "storage", "intent.md", ErrUnknownComponent},
		{"rounds is not a component", "rounds", "intent.md", ErrInvalid},
		{"lib has no intent.md", "lib", "verify.sh", ErrUnknownComponent},
		{"unknown document", "os-layer", "secrets.txt", ErrUnknownDocument},
		{"traversal document", "os-layer", "../control-plane/intent.md", ErrUnknownDocument},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := r.Document(tt.component, tt.doc); !errors.Is(err, tt.want) {
				t.Errorf("Document(%q, %q) err = %v, want %v", tt.component, tt.doc, err, tt.want)
			}
		})
	}

	// A document that is a symbolic link out of the repository is refused.
	if err := os.Remove(filepath.Join(dir, "postgres", "runbook.md")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "postgres", "runbook.md")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Document("postgres", "runbook.md"); !errors.Is(err, ErrInvalid) {
		t.Errorf("symlinked document: err = %v, want ErrInvalid", err)
	}

	for _, uri := range []string{"intent://os-layer/../x", "intent:///intent.md", "http://os-layer/intent.md", "intent://os-layer/", "intent://os-layer/intent.md/x"} {
		if _, _, err := ParseURI(uri); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseURI(%q) err = %v, want ErrInvalid", uri, err)
		}
	}
}

func TestOpenRefuses(t *testing.T) {
	dir := newExampleRepo(t)
	plain := t.TempDir()
	tests := []struct {
		name string
		path string
		opts Options
		want error
	}{
		{"plain folder", plain, Options{}, ErrNotRepo},
		{"subfolder of a repository", filepath.Join(dir, "os-layer"), Options{}, ErrNotRepo},
		{"missing path", filepath.Join(plain, "nope"), Options{}, ErrNotRepo},
		{"protected working branch", dir, Options{WorkingBranch: "main"}, ErrProtectedBranch},
		{"custom protected branch", dir, Options{WorkingBranch: "release", Protected: []string{"release"}}, ErrProtectedBranch},
		{"bad round id", dir, Options{RoundID: "../../x"}, ErrInvalid},
		{"bad branch", dir, Options{WorkingBranch: "a..b"}, ErrInvalid},
		{"branch ending in .lock", dir, Options{WorkingBranch: "x.lock"}, ErrInvalid},
		{"author with newline", dir, Options{RoundID: "r1", AuthorName: "a\nb"}, ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Open(tt.path, tt.opts); !errors.Is(err, tt.want) {
				t.Errorf("Open err = %v, want %v", err, tt.want)
			}
		})
	}
	r, err := Open(dir, Options{RoundID: "2025-12"})
	if err != nil || r.WorkingBranch() != "mcp-patch/round-2025-12" {
		t.Errorf("default working branch %q, err %v", r.WorkingBranch(), err)
	}
}
