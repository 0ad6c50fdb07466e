package machine

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const fixtures = "../../../testdata/fixtures"

// TestGrubEnvAgainstGrubEditenv checks the environment block both ways
// against the real grub-editenv.
func TestGrubEnvAgainstGrubEditenv(t *testing.T) {
	editenv, err := exec.LookPath("grub-editenv")
	if err != nil {
		t.Fatalf("grub-editenv (grub2-common) is needed: %v", err)
	}
	dir := t.TempDir()
	vals := map[string]string{"next_entry": "gnulinux-advanced-u>gnulinux-6.8.0-51-generic-advanced-u", "saved_entry": `back\slash`, "multi": "l1\nl2"}

	t.Run("written here, read by grub-editenv", func(t *testing.T) {
		env := &GrubEnv{}
		for _, k := range []string{"next_entry", "saved_entry", "multi"} {
			env.Set(k, vals[k])
		}
		p := filepath.Join(dir, "ours")
		if err := WriteGrubEnv(p, env); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(editenv, p, "list").CombinedOutput()
		if err != nil {
			t.Fatalf("grub-editenv list: %v: %s", err, out)
		}
		want := "next_entry=" + vals["next_entry"] + "\nsaved_entry=" + vals["saved_entry"] + "\nmulti=l1\nl2\n"
		if diff := cmp.Diff(want, string(out)); diff != "" {
			t.Errorf("grub-editenv list (-want +got):\n%s", diff)
		}
	})
	t.Run("written by grub-editenv, read here", func(t *testing.T) {
		p := filepath.Join(dir, "theirs")
		for _, args := range [][]string{{p, "create"}, {p, "set", "next_entry=" + vals["next_entry"], "saved_entry=" + vals["saved_entry"], "multi=" + vals["multi"]}} {
			if out, err := exec.Command(editenv, args...).CombinedOutput(); err != nil {
				t.Fatalf("grub-editenv %v: %v: %s", args, err, out)
			}
		}
		env, err := ReadGrubEnv(p)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(vals, env.Values); diff != "" {
			t.Errorf("parsed (-want +got):\n%s", diff)
		}
		ours, _ := env.Bytes()
		theirs, _ := os.ReadFile(p)
		if diff := cmp.Diff(string(theirs), string(ours)); diff != "" {
			t.Errorf("re-rendered block differs from grub-editenv's (-theirs +ours):\n%s", diff)
		}
	})
	t.Run("real empty block", func(t *testing.T) {
		data, err := os.ReadFile(filepath.Join(fixtures, "grub", "grubenv_empty-ubuntu2204-aws"))
		if err != nil {
			t.Fatal(err)
		}
		ours, _ := (&GrubEnv{}).Bytes()
		if diff := cmp.Diff(string(data), string(ours)); diff != "" {
			t.Errorf("empty block (-real +ours):\n%s", diff)
		}
	})
}

// TestCompareVersionsAgainstDpkg checks the ordering with the real
// `dpkg --compare-versions`.
func TestCompareVersionsAgainstDpkg(t *testing.T) {
	dpkg, err := exec.LookPath("dpkg")
	if err != nil {
		t.Fatalf("dpkg is needed: %v", err)
	}
	pairs := [][2]string{
		{"6.8.0-48", "6.8.0-51"}, {"6.8.0-51", "6.8.0-48"}, {"6.8.0-9", "6.8.0-10"}, {"6.8.0.48.48", "6.8.0.51.52"},
		{"1:9.6p1-3ubuntu13.5", "1:9.6p1-3ubuntu13.8"}, {"1:1.0", "2.0"}, {"1.0~rc1", "1.0"}, {"1.0", "1.0"},
		{"2024a-3ubuntu1.1", "2024b-0ubuntu0.24.04.1"}, {"1.7.24-0ubuntu1~24.04.1", "1.7.24-0ubuntu1"},
		{"3.0.13-0ubuntu3.4", "3.0.13-0ubuntu3.10"}, {"1.0a", "1.0+"}, {"6.8.0-51.52+1", "6.8.0-51.52"}, {"0.9", "0.10"},
	}
	for _, p := range pairs {
		t.Run(p[0]+" vs "+p[1], func(t *testing.T) {
			want := 0
			for _, c := range []struct {
				op string
				v  int
			}{{"lt", -1}, {"gt", 1}} {
				if exec.Command(dpkg, "--compare-versions", p[0], c.op, p[1]).Run() == nil {
					want = c.v
				}
			}
			if got := CompareVersions(p[0], p[1]); got != want {
				t.Errorf("CompareVersions = %d, dpkg says %d", got, want)
			}
		})
	}
}

// TestParseRealGrubCfgs reads real generated grub.cfg files: entry ids
// with their submenu path resolve to the kernel GRUB would boot.
func TestParseRealGrubCfgs(t *testing.T) {
	tests := []struct {
		file, value, wantKernel string
	}{
		{"grub.cfg_ubuntu2204-cloudimg-1kernel-5.15.0-100.cfg", "0", "5.15.0-100-generic"},
		{"grub.cfg_ubuntu2204-cloudimg-1kernel-5.15.0-100.cfg",
			"gnulinux-advanced-e8328184-226c-4e5e-9635-8142cc114051>gnulinux-5.15.0-100-generic-recovery-e8328184-226c-4e5e-9635-8142cc114051", "5.15.0-100-generic"},
		{"grub.cfg_ubuntu2204-aws-2kernels-partuuid-initrdless.cfg", "1>2", "5.15.0-1026-aws"},
		{"grub.cfg_ubuntu2204-aws-2kernels-partuuid-initrdless.cfg", "Advanced options for Ubuntu>Ubuntu, with Linux 5.15.0-1026-aws", "5.15.0-1026-aws"},
		{"grub.cfg_ubuntu2004_no-submenu_2kernels_os-prober_anonymized-uuids.cfg", "2", "5.4.0-73-generic"},
		{"grub.cfg_debian9-stretch_4.9.0-3-amd64_advanced-options-for-debian.cfg", "0", "4.9.0-3-amd64"},
	}
	for _, tt := range tests {
		t.Run(tt.file+" "+tt.value, func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(fixtures, "grub", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			m, err := ParseGrubCfg(data)
			if err != nil {
				t.Fatal(err)
			}
			if !m.OneShot {
				t.Error("the next_entry logic of 00_header was not found")
			}
			e, _, err := m.Resolve(tt.value)
			if err != nil {
				t.Fatal(err)
			}
			if k, _ := e.Kernel(); k != tt.wantKernel {
				t.Errorf("kernel = %q, want %q", k, tt.wantKernel)
			}
		})
	}
}

func testSettings() GrubSettings {
	return GrubSettings{Default: "0", Distributor: "Ubuntu", Timeout: "0", TimeoutStyle: "hidden"}
}

// TestGeneratedGrubCfgHasUbuntuShape compares the generated menu with the
// real 22.04 one: the same 00_header one-shot logic, the same entry and
// submenu lines (with this host's uuid and kernel).
func TestGeneratedGrubCfgHasUbuntuShape(t *testing.T) {
	real, err := os.ReadFile(filepath.Join(fixtures, "grub", "grub.cfg_ubuntu2204-cloudimg-1kernel-5.15.0-100.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	const uuid = "e8328184-226c-4e5e-9635-8142cc114051"
	set := testSettings()
	set.CmdlineLinuxDefault = "console=tty1 console=ttyS0"
	gen := GenerateGrubCfg(set, GrubLayout{RootUUID: uuid}, []string{"5.15.0-100-generic"})
	block := func(s, begin, end string) string {
		i := strings.Index(s, begin)
		j := strings.Index(s[i:], end)
		return s[i : i+j]
	}
	oneShot := func(s string) string { return block(s, "if [ \"${next_entry}\" ] ; then", "fi\n") }
	if diff := cmp.Diff(oneShot(string(real)), oneShot(gen)); diff != "" {
		t.Errorf("one-shot header (-real +generated):\n%s", diff)
	}
	entryLines := func(s string) []string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			tl := strings.TrimSpace(l)
			if strings.HasPrefix(tl, "menuentry 'Ubuntu") || strings.HasPrefix(tl, "submenu ") {
				out = append(out, l)
			}
		}
		return out
	}
	if diff := cmp.Diff(entryLines(string(real)), entryLines(gen)); diff != "" {
		t.Errorf("menu lines (-real +generated):\n%s", diff)
	}
	m, err := ParseGrubCfg([]byte(gen))
	if err != nil {
		t.Fatal(err)
	}
	e, path, err := m.Resolve("gnulinux-advanced-" + uuid + ">gnulinux-5.15.0-100-generic-advanced-" + uuid)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.Linux, "root=UUID="+uuid+" ro  console=tty1 console=ttyS0") && e.Args() != "root=UUID="+uuid+" ro console=tty1 console=ttyS0" {
		t.Errorf("linux line %q", e.Linux)
	}
	if path != "gnulinux-advanced-"+uuid+">gnulinux-5.15.0-100-generic-advanced-"+uuid {
		t.Errorf("path %q", path)
	}
}

func TestChooseBoot(t *testing.T) {
	const u = "u1"
	sub := "gnulinux-advanced-" + u
	old := sub + ">gnulinux-6.8.0-48-generic-advanced-" + u
	newE := sub + ">gnulinux-6.8.0-51-generic-advanced-" + u
	tests := []struct {
		name        string
		def         string
		env         map[string]string
		wantKernel  string
		wantPath    string
		wantNext    bool
		wantFallbck bool
	}{
		{"default 0 boots the newest", "0", nil, "6.8.0-51-generic", "gnulinux-simple-" + u, false, false},
		{"next_entry wins once", old, map[string]string{"next_entry": newE}, "6.8.0-51-generic", newE, true, false},
		{"empty next_entry is ignored", old, map[string]string{"next_entry": ""}, "6.8.0-48-generic", old, false, false},
		{"saved entry", "saved", map[string]string{"saved_entry": old}, "6.8.0-48-generic", old, false, false},
		{"numeric path into the submenu", "1>2", nil, "6.8.0-48-generic", old, false, false},
		{"title path", "Advanced options for Ubuntu>Ubuntu, with Linux 6.8.0-48-generic", nil, "6.8.0-48-generic", old, false, false},
		{"unknown entry falls back to 0", "gnulinux-advanced-u1>nope", nil, "6.8.0-51-generic", "gnulinux-simple-" + u, false, true},
		{"submenu alone boots its first entry", sub, nil, "6.8.0-51-generic", newE, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set := testSettings()
			set.Default = tt.def
			m, err := ParseGrubCfg([]byte(GenerateGrubCfg(set, GrubLayout{RootUUID: u}, []string{"6.8.0-48-generic", "6.8.0-51-generic"})))
			if err != nil {
				t.Fatal(err)
			}
			env := &GrubEnv{}
			for k, v := range tt.env {
				env.Set(k, v)
			}
			d, err := ChooseBoot(m, env)
			if err != nil {
				t.Fatal(err)
			}
			k, _ := d.Entry.Kernel()
			got := []any{k, d.Path, d.FromNextEntry, d.Fallback}
			want := []any{tt.wantKernel, tt.wantPath, tt.wantNext, tt.wantFallbck}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestUpdateGrubHonoursDropIns runs the GRUB defaults through the real
// /bin/sh as grub-mkconfig does: the trial-boot drop-in overrides
// GRUB_DEFAULT and extends GRUB_CMDLINE_LINUX_DEFAULT.
func TestUpdateGrubHonoursDropIns(t *testing.T) {
	dir := t.TempDir()
	h, err := Create(dir, NewState(Spec{Hostname: "gpu-1", Role: RoleGPU}))
	if err != nil {
		t.Fatal(err)
	}
	if err := Populate(h, "/usr/bin:/bin"); err != nil {
		t.Fatal(err)
	}
	st, _ := h.View()
	old := "gnulinux-advanced-" + st.RootUUID + ">gnulinux-6.8.0-48-generic-advanced-" + st.RootUUID
	dropin := "GRUB_DEFAULT=\"" + old + "\"\nGRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT panic=10\"\n"
	if err := os.WriteFile(h.Path("/etc/default/grub.d/99-trial-boot.cfg"), []byte(dropin), 0o644); err != nil {
		t.Fatal(err)
	}
	var res UpdateGrubResult
	if err := h.Update(func(s *State) error { res, err = UpdateGrub(h, s, "/usr/bin:/bin"); return err }); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"/etc/default/grub", "/etc/default/grub.d/99-trial-boot.cfg", "/etc/default/grub.d/init-select.cfg"}, res.Settings.Sourced); diff != "" {
		t.Errorf("sourced files (-want +got):\n%s", diff)
	}
	cfg, _ := os.ReadFile(h.Path("/boot/grub/grub.cfg"))
	m, err := ParseGrubCfg(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if m.Default != old {
		t.Errorf("default = %q, want %q", m.Default, old)
	}
	e, _, err := m.Resolve(old)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(e.Args(), "panic=10") {
		t.Errorf("linux args %q lack panic=10", e.Args())
	}
	if got := res.Kernels; !slices.Equal(got, []string{"6.8.0-48-generic", "6.8.0-45-generic"}) {
		t.Errorf("kernels = %v", got)
	}
}

func TestPlanFullUpgrade(t *testing.T) {
	names := func(ops []AptOp, new bool) []string {
		var out []string
		for _, o := range ops {
			if o.New == new {
				out = append(out, o.Pkg.Name)
			}
		}
		slices.Sort(out)
		return out
	}
	tests := []struct {
		name         string
		role         Role
		mutate       func(s *State)
		wantNew      []string
		wantKeptBack []string
		wantRemoved  int
	}{
		{"control plane", RoleControlPlane, func(*State) {},
			[]string{"linux-headers-6.8.0-51", "linux-headers-6.8.0-51-generic", "linux-image-6.8.0-51-generic", "linux-modules-6.8.0-51-generic"},
			[]string{"containerd", "cri-tools", "kubeadm", "kubectl", "kubelet"}, 0},
		{"kubelet unheld", RoleControlPlane, func(s *State) { s.Packages["kubelet"].Hold = false },
			[]string{"linux-headers-6.8.0-51", "linux-headers-6.8.0-51-generic", "linux-image-6.8.0-51-generic", "linux-modules-6.8.0-51-generic"},
			[]string{"containerd", "cri-tools", "kubeadm", "kubectl"}, 0},
		{"nvidia modules unpublished", RoleGPU, func(s *State) {
			s.Faults.Unavailable = []string{"linux-modules-nvidia-550-server-6.8.0-51-generic"}
		},
			[]string{"linux-headers-6.8.0-51", "linux-headers-6.8.0-51-generic", "linux-image-6.8.0-51-generic", "linux-modules-6.8.0-51-generic"},
			[]string{"containerd", "cri-tools", "kubeadm", "kubectl", "kubelet", "linux-modules-nvidia-550-server-generic"}, 0},
		{"removal", RoleGPU, func(s *State) { s.Faults.RemoveOnUpgrade = []string{"nvidia-fabricmanager-550"} },
			[]string{"linux-headers-6.8.0-51", "linux-headers-6.8.0-51-generic", "linux-image-6.8.0-51-generic", "linux-modules-6.8.0-51-generic",
				"linux-modules-nvidia-550-server-6.8.0-51-generic", "linux-objects-nvidia-550-server-6.8.0-51-generic", "linux-signatures-nvidia-6.8.0-51-generic"},
			[]string{"containerd", "cri-tools", "kubeadm", "kubectl", "kubelet"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewState(Spec{Hostname: "h", Role: tt.role})
			tt.mutate(s)
			p := PlanFullUpgrade(s)
			got := []any{names(p.Install, true), p.KeptBack, len(p.Remove)}
			if diff := cmp.Diff([]any{tt.wantNew, tt.wantKeptBack, tt.wantRemoved}, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			pos := map[string]int{}
			for i, o := range p.Install {
				pos[o.Pkg.Name] = i
			}
			for _, o := range p.Install {
				for _, d := range o.Pkg.Depends {
					if i, ok := pos[d]; ok && s.Packages[d].Version == "" && i > pos[o.Pkg.Name] {
						t.Errorf("%s is installed before its new dependency %s", o.Pkg.Name, d)
					}
				}
			}
		})
	}
}

// TestAutoremoveKeepsRunningAndNewestTwo: only a kernel that is neither
// running nor among the two newest goes.
func TestAutoremoveKeepsRunningAndNewestTwo(t *testing.T) {
	s := NewState(Spec{Hostname: "h", Role: RoleGPU})
	if got := Autoremovable(s); len(got) != 0 {
		t.Errorf("before the upgrade: %v", got)
	}
	for _, p := range s.Packages {
		if p.Kernel == "6.8.0-51" {
			p.Version, p.Candidate = p.Candidate, ""
		}
	}
	want := []string{"linux-headers-6.8.0-45", "linux-headers-6.8.0-45-generic", "linux-image-6.8.0-45-generic", "linux-modules-6.8.0-45-generic",
		"linux-modules-nvidia-550-server-6.8.0-45-generic", "linux-objects-nvidia-550-server-6.8.0-45-generic", "linux-signatures-nvidia-6.8.0-45-generic"}
	if diff := cmp.Diff(want, Autoremovable(s)); diff != "" {
		t.Errorf("after installing 6.8.0-51 (-want +got):\n%s", diff)
	}
	s.Kernel = "6.8.0-45-generic"
	if got := Autoremovable(s); len(got) != 0 {
		t.Errorf("running 6.8.0-45, nothing may go: %v", got)
	}
}

func TestNvidiaSmiXMLKeepsTheRealStructure(t *testing.T) {
	s := NewState(Spec{Hostname: "gpu-1", Role: RoleGPU})
	s.DriverLoaded, s.GPUsVisible = true, 7
	s.Services["nvidia-fabricmanager.service"].ActiveState = "active"
	out := NvidiaSmiXML(s, time.Unix(0, 0))
	tags := func(doc string) []string {
		var out []string
		for _, l := range strings.Split(doc, "\n") {
			l = strings.TrimSpace(l)
			if strings.HasPrefix(l, "<") && !strings.HasPrefix(l, "</") {
				name, _, _ := strings.Cut(strings.TrimPrefix(l, "<"), ">")
				name, _, _ = strings.Cut(name, " ")
				out = append(out, name)
			}
		}
		return out
	}
	realTags := tags(nvsmiTemplate)
	gpuTags := tags(nvsmiTemplate[strings.Index(nvsmiTemplate, "<gpu id="):strings.Index(nvsmiTemplate, "</gpu>")])
	want := slices.Clone(realTags[:slices.Index(realTags, "gpu")])
	for i := 0; i < 7; i++ {
		want = append(want, gpuTags...)
	}
	if diff := cmp.Diff(want, tags(out)); diff != "" {
		t.Errorf("element sequence differs from the real capture's (-want +got):\n%s", diff)
	}
	for _, s := range []string{"<attached_gpus>7</attached_gpus>", "<product_name>NVIDIA H100 80GB HBM3</product_name>", "<state>Completed</state>", `<gpu id="00000000:18:00.0">`} {
		if !strings.Contains(out, s) {
			t.Errorf("XML lacks %s", s)
		}
	}
}
