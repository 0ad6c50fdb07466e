package parse

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const awsUUID = "b78b2f9f-3a08-427a-ad4e-4a04f235761c"

func TestParseGrubCfgFixtures(t *testing.T) {
	type short struct{ ID, IndexPath, Kernel string }
	tests := []struct {
		name       string
		file       string
		entries    []short
		def        string
		lacksWrite bool
	}{
		{
			name: "ubuntu 22.04 aws, two kernels in the advanced submenu",
			file: "grub/grub.cfg_ubuntu2204-aws-2kernels-partuuid-initrdless.cfg",
			entries: []short{
				{"gnulinux-simple-" + awsUUID, "0", "5.15.0-1028-aws"},
				{"gnulinux-advanced-" + awsUUID + ">gnulinux-5.15.0-1028-aws-advanced-" + awsUUID, "1>0", "5.15.0-1028-aws"},
				{"gnulinux-advanced-" + awsUUID + ">gnulinux-5.15.0-1028-aws-recovery-" + awsUUID, "1>1", "5.15.0-1028-aws"},
				{"gnulinux-advanced-" + awsUUID + ">gnulinux-5.15.0-1026-aws-advanced-" + awsUUID, "1>2", "5.15.0-1026-aws"},
				{"gnulinux-advanced-" + awsUUID + ">gnulinux-5.15.0-1026-aws-recovery-" + awsUUID, "1>3", "5.15.0-1026-aws"},
			},
			def: "0",
		},
		{
			name: "ubuntu 14.04 root and boot on LVM",
			file: "grub/grub.cfg_ubuntu1404_root-and-boot-on-LVM_recordfail-disabled_forum-bootinfo.cfg",
			entries: []short{
				{"gnulinux-simple-9a7e2b1d-5f8b-4e1c-9972-1caa9b1a94e5", "0", "4.2.0-35-generic"},
				{"gnulinux-advanced-9a7e2b1d-5f8b-4e1c-9972-1caa9b1a94e5>gnulinux-4.2.0-35-generic-advanced-9a7e2b1d-5f8b-4e1c-9972-1caa9b1a94e5", "1>0", "4.2.0-35-generic"},
				{"gnulinux-advanced-9a7e2b1d-5f8b-4e1c-9972-1caa9b1a94e5>gnulinux-4.2.0-35-generic-recovery-9a7e2b1d-5f8b-4e1c-9972-1caa9b1a94e5", "1>1", "4.2.0-35-generic"},
				{"Memory test (memtest86+)", "2", ""},
				{"Memory test (memtest86+, serial console 115200)", "3", ""},
			},
			def:        "0",
			lacksWrite: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := ParseGrubCfg(fixture(t, tc.file))
			var got []short
			for _, e := range m.Entries {
				got = append(got, short{e.ID, e.IndexPath, e.Kernel})
			}
			if d := cmp.Diff(tc.entries, got); d != "" {
				t.Errorf("entries (-want +got)\n%s", d)
			}
			if m.Default != tc.def || !m.HonoursNextEntry {
				t.Errorf("default %q honours next_entry %v", m.Default, m.HonoursNextEntry)
			}
			if (m.LacksWriteSupport != "") != tc.lacksWrite {
				t.Errorf("lacks write support %q", m.LacksWriteSupport)
			}
		})
	}
}

// awkEntries runs grub_entries from trial_boot.sh on cfg.
func awkEntries(t testing.TB, block, cfg string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "grub.cfg")
	if err := os.WriteFile(f, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return runShell(t, block+"\ngrub_entries \"$1\"", nil, f)
}

func goEntries(m GrubMenu) string {
	var b strings.Builder
	for _, e := range m.Entries {
		b.WriteString(e.ID + "\t" + e.IndexPath + "\t" + e.Kernel + "\t" + e.Title + "\n")
	}
	return b.String()
}

var grubTricky = []string{
	"menuentry 'It'\\''s' --id 'a' {\n\tlinux /vmlinuz-1.2.3-x root=/\n}\n",
	"submenu \"Sub \\\"q\\\"\" --id=s {\n menuentry x {\n linux16\t/boot/vmlinux-9.9 q\n }\n menuentry y\n}\n}\n",
	"menuentry 'no brace'\nmenuentry 'b' $menuentry_id_option 'b-id' {\nif true; then {\n}\nfi\n}\n",
	"submenu 'a' {\nsubmenu 'b' {\nmenuentry 'c' {\n}\n}\nmenuentry 'd' {\n}\n}\nmenuentry 'e' {\n}\n",
	"menuentry '\n",
	"menuentry\t'tab'\t{\r\n  linuxefi  '/boot/vmlinuz-6.8.0-45-generic' ro\r\n}\r\n",
}

func TestGrubEntriesMatchScript(t *testing.T) {
	block := scriptBlock(t, "trial_boot.sh", "grub-entries")
	if b := scriptBlock(t, "promote.sh", "grub-entries"); b != block {
		t.Fatal("grub-entries differs between trial_boot.sh and promote.sh")
	}
	inputs := append([]string{}, grubTricky...)
	for _, f := range fixtureFiles(t, "grub", "grub.cfg_") {
		inputs = append(inputs, fixture(t, strings.TrimPrefix(f, "testdata/fixtures/")))
	}
	for i, in := range inputs {
		if d := cmp.Diff(awkEntries(t, block, in), goEntries(ParseGrubCfg(in))); d != "" {
			t.Errorf("input %d: (-awk +go)\n%s", i, d)
		}
	}
}

func FuzzGrubEntriesAgainstScript(f *testing.F) {
	block := scriptBlock(f, "trial_boot.sh", "grub-entries")
	for _, s := range grubTricky {
		f.Add(s)
	}
	f.Add(fixture(f, "grub/grub.cfg_ubuntu2204-cloudimg-1kernel-5.15.0-100.cfg"))
	f.Fuzz(func(t *testing.T, cfg string) {
		if strings.ContainsRune(cfg, 0) {
			t.Skip("grub.cfg never holds NUL")
		}
		if d := cmp.Diff(awkEntries(t, block, cfg), goEntries(ParseGrubCfg(cfg))); d != "" {
			t.Fatalf("(-awk +go)\n%s", d)
		}
	})
}

func FuzzParseGrubCfg(f *testing.F) {
	for _, p := range fixtureFiles(f, "grub", "") {
		f.Add(fixture(f, strings.TrimPrefix(p, "testdata/fixtures/")))
	}
	for _, s := range grubTricky {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, cfg string) {
		m := ParseGrubCfg(cfg)
		for _, e := range m.Entries {
			if strings.Count(e.ID, ">") < strings.Count(e.IndexPath, ">") {
				t.Fatalf("id %q shallower than index %q", e.ID, e.IndexPath)
			}
			got, err := m.Resolve(e.IndexPath)
			if err != nil {
				t.Fatalf("index path %q of %q does not resolve: %v", e.IndexPath, e.ID, err)
			}
			if got.IndexPath != e.IndexPath {
				t.Fatalf("index %q resolved to %q", e.IndexPath, got.IndexPath)
			}
		}
		_, _ = NextBoot(m, GrubEnv{Vars: map[string]string{"next_entry": cfg, "saved_entry": cfg}})
		_ = ParseGrubDefaults([]GrubDefaultsFile{{Path: "x", Content: cfg}})
	})
}

func TestNextBoot(t *testing.T) {
	m := ParseGrubCfg(fixture(t, "grub/grub.cfg_ubuntu2204-aws-2kernels-partuuid-initrdless.cfg"))
	sub := "gnulinux-advanced-" + awsUUID
	old := sub + ">gnulinux-5.15.0-1026-aws-advanced-" + awsUUID
	env := func(kv ...string) GrubEnv {
		e := GrubEnv{Vars: map[string]string{}}
		for i := 0; i+1 < len(kv); i += 2 {
			e.Vars[kv[i]] = kv[i+1]
		}
		return e
	}
	withDefault := func(d string) GrubMenu { c := m; c.Default = d; return c }
	tests := []struct {
		name   string
		menu   GrubMenu
		env    GrubEnv
		source string
		kernel string
		err    error
	}{
		{"first entry", m, env(), "default", "5.15.0-1028-aws", nil},
		{"one-shot next_entry wins", m, env("next_entry", old), "next_entry", "5.15.0-1026-aws", nil},
		{"trial-boot default by id path", withDefault(old), env(), "default", "5.15.0-1026-aws", nil},
		{"index path", withDefault("1>2"), env(), "default", "5.15.0-1026-aws", nil},
		{"title path", withDefault("Advanced options for Ubuntu>Ubuntu, with Linux 5.15.0-1026-aws"), env(), "default", "5.15.0-1026-aws", nil},
		{"mixed id and index", withDefault(sub + ">2"), env(), "default", "5.15.0-1026-aws", nil},
		{"saved_entry", withDefault("${saved_entry}"), env("saved_entry", old), "saved_entry", "5.15.0-1026-aws", nil},
		{"empty saved_entry means 0", withDefault("${saved_entry}"), env(), "saved_entry", "5.15.0-1028-aws", nil},
		{"bare nested id does not resolve", withDefault("gnulinux-5.15.0-1026-aws-advanced-" + awsUUID), env(), "default", "", ErrUnresolved},
		{"a submenu is not an entry", withDefault("1"), env(), "default", "", ErrUnresolved},
		{"past the end", withDefault("7"), env(), "default", "", ErrUnresolved},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NextBoot(tc.menu, tc.env)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if got.Source != tc.source || got.Entry.Kernel != tc.kernel {
				t.Errorf("got %s %q, want %s %q", got.Source, got.Entry.Kernel, tc.source, tc.kernel)
			}
		})
	}
}

func TestParseGrubEnvFixture(t *testing.T) {
	env, err := ParseGrubEnv([]byte(fixture(t, "grub/grubenv_empty-ubuntu2204-aws")))
	if err != nil {
		t.Fatal(err)
	}
	if len(env.Vars) != 0 || env.Size != GrubEnvSize {
		t.Errorf("got %+v", env)
	}
	for name, data := range map[string]string{
		"short":     "# GRUB Environment Block\nnext_entry=x\n",
		"no header": strings.Repeat("#", 1024),
	} {
		if _, err := ParseGrubEnv([]byte(data)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestParseGrubEnvAgainstGrubEditenv writes blocks with the real
// grub-editenv and checks the parser reads what `grub-editenv list` does.
func TestParseGrubEnvAgainstGrubEditenv(t *testing.T) {
	if _, err := exec.LookPath("grub-editenv"); err != nil {
		t.Fatal("grub-editenv is needed (package grub2-common)")
	}
	f := filepath.Join(t.TempDir(), "grubenv")
	run := func(args ...string) string {
		out, err := exec.Command("grub-editenv", append([]string{f}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("grub-editenv %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	run("create")
	id := "gnulinux-advanced-" + awsUUID + ">gnulinux-5.15.0-1026-aws-advanced-" + awsUUID
	run("set", "next_entry="+id, "saved_entry=0", "odd=a\\b", "eq=x=y")
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	env, err := ParseGrubEnv(data)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(run("list")), "\n") {
		k, v, _ := strings.Cut(l, "=")
		want[k] = v
	}
	if d := cmp.Diff(want, env.Vars); d != "" {
		t.Errorf("(-grub-editenv list +parsed)\n%s", d)
	}
	if env.Get("next_entry") != id {
		t.Errorf("next_entry = %q", env.Get("next_entry"))
	}
	run("unset", "next_entry")
	data, _ = os.ReadFile(f)
	if env, err = ParseGrubEnv(data); err != nil || env.Get("next_entry") != "" {
		t.Errorf("after unset: %v %+v", err, env)
	}
}

func FuzzParseGrubEnv(f *testing.F) {
	f.Add([]byte(fixture(f, "grub/grubenv_empty-ubuntu2204-aws")))
	blk := grubEnvHeader + "next_entry=a>b\nsaved_entry=x\\\ny\n"
	f.Add([]byte(blk + strings.Repeat("#", GrubEnvSize-len(blk))))
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := ParseGrubEnv(data)
		if err == nil && len(env.Order) != len(env.Vars) {
			t.Fatalf("order %v vars %v", env.Order, env.Vars)
		}
	})
}

func TestParseGrubDefaults(t *testing.T) {
	files := []GrubDefaultsFile{
		{Path: "/etc/default/grub", Content: fixture(t, "grub/etc-default-grub_ubuntu2204-aws")},
		{Path: "/etc/default/grub.d/50-cloudimg-settings.cfg", Content: fixture(t, "grub/etc-default-grub.d-50-cloudimg-settings_ubuntu2204-aws.cfg")},
		{Path: "/etc/default/grub.d/99-trial-boot.cfg", Content: "GRUB_DEFAULT=\"a>b\"\nGRUB_CMDLINE_LINUX_DEFAULT=\"$GRUB_CMDLINE_LINUX_DEFAULT panic=10\"\n"},
	}
	want := GrubDefaults{
		Default: "a>b", CmdlineDefault: "console=tty1 console=ttyS0 nvme_core.io_timeout=4294967295 panic=10",
		DefaultSetBy: "/etc/default/grub.d/99-trial-boot.cfg",
	}
	if d := cmp.Diff(want, ParseGrubDefaults(files)); d != "" {
		t.Errorf("(-want +got)\n%s", d)
	}
}
