package steps

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/aptlab"
)

const testNode = "gpu-01"

// fixturesDir holds the real samples (copies of ../shared/fixtures) kept
// with host/parse.
var fixturesDir = filepath.Join("..", "parse", "testdata", "fixtures")

func readFixture(t testing.TB, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixturesDir, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func runningKernel(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("uname", "-r").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// stubDir is a directory put first on the scripts' PATH. Each stand-in is a
// tool that cannot run for real here (update-grub would rewrite this
// machine's /boot; reboot would reboot it; there is no GPU); every test says
// which it uses.
func stubDir(t testing.TB, stubs map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range stubs {
		writeFile(t, filepath.Join(dir, name), "#!/bin/sh\n"+body, 0o755)
	}
	return dir
}

// updateGrubStub stands in for update-grub (grub-mkconfig against the real
// /boot). Like grub-mkconfig's 00_header it sources /etc/default/grub and
// grub.d/*.cfg and writes `set default="$GRUB_DEFAULT"` into the else
// branch of grub.cfg; the menu entries stay as they are.
const updateGrubStub = `set -eu
dir=$(dirname "$GRUB_DROPIN")
GRUB_DEFAULT=0
. "$dir/../grub"
for f in "$dir"/*.cfg; do [ -r "$f" ] && . "$f"; done
awk -v d="$GRUB_DEFAULT" '
	/^[ \t]*set default="\$\{next_entry\}"/ { print; next }
	/^[ \t]*set default=/ && !done { sub(/set default=.*/, "set default=\"" d "\""); done = 1 }
	{ print }' "$GRUB_CFG" >"$GRUB_CFG.new"
mv "$GRUB_CFG.new" "$GRUB_CFG"
echo "update-grub (test stand-in): default=$GRUB_DEFAULT cmdline=$GRUB_CMDLINE_LINUX_DEFAULT" >&2
`

// grubRoot is a temp root with a real Ubuntu grub.cfg sample whose older
// kernel (5.15.0-1026-aws) is renamed to the kernel running here, so that
// entry is "the running kernel" for the trial boot checks.
type grubRoot struct {
	dir, grubDir, cfg, dropin, procSys, bootID, stateDir string
	oldEntry, newEntry, oldKernel, newKernel             string
}

func newGrubRoot(t testing.TB, fixtureCfg string) *grubRoot {
	t.Helper()
	r := &grubRoot{dir: t.TempDir()}
	r.grubDir = filepath.Join(r.dir, "boot", "grub")
	r.cfg = filepath.Join(r.grubDir, "grub.cfg")
	r.dropin = filepath.Join(r.dir, "etc", "default", "grub.d", "99-trial-boot.cfg")
	r.procSys = filepath.Join(r.dir, "proc", "sys")
	r.bootID = filepath.Join(r.dir, "boot_id")
	r.stateDir = filepath.Join(r.dir, "var", "lib", "mcp-patch")
	r.oldKernel = runningKernel(t)
	r.newKernel = "5.15.0-1028-aws"
	cfg := strings.ReplaceAll(readFixture(t, fixtureCfg), "5.15.0-1026-aws", r.oldKernel)
	writeFile(t, r.cfg, cfg, 0o644)
	writeFile(t, filepath.Join(r.grubDir, "grubenv"), readFixture(t, "grub/grubenv_empty-ubuntu2204-aws"), 0o644)
	writeFile(t, filepath.Join(r.dir, "etc", "default", "grub"), readFixture(t, "grub/etc-default-grub_ubuntu2204-aws"), 0o644)
	writeFile(t, filepath.Join(r.dir, "etc", "default", "grub.d", "50-cloudimg-settings.cfg"),
		readFixture(t, "grub/etc-default-grub.d-50-cloudimg-settings_ubuntu2204-aws.cfg"), 0o644)
	writeFile(t, filepath.Join(r.procSys, "kernel", "panic"), "10\n", 0o644)
	writeFile(t, r.bootID, "11111111-1111-1111-1111-111111111111\n", 0o644)
	uuid := "b78b2f9f-3a08-427a-ad4e-4a04f235761c"
	r.oldEntry = "gnulinux-advanced-" + uuid + ">gnulinux-" + r.oldKernel + "-advanced-" + uuid
	r.newEntry = "gnulinux-advanced-" + uuid + ">gnulinux-5.15.0-1028-aws-advanced-" + uuid
	return r
}

func (r *grubRoot) paths() Paths {
	return Paths{
		GrubCfg: r.cfg, GrubDir: r.grubDir, GrubDropin: r.dropin, GrubDefaults: filepath.Join(r.dir, "etc", "default", "grub"),
		ProcSys: r.procSys, BootIDFile: r.bootID, StateDir: r.stateDir,
	}
}

// grubenvList is `grub-editenv <grubenv> list` (the real tool).
func (r *grubRoot) grubenvList(t testing.TB) map[string]string {
	t.Helper()
	out, err := exec.Command("grub-editenv", filepath.Join(r.grubDir, "grubenv"), "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			vars[k] = v
		}
	}
	return vars
}

// bootAs does what GRUB and the kernel do on a reboot: GRUB's header reads
// next_entry, boots it and clears it with `save_env next_entry` (here the
// real `grub-editenv unset next_entry`, which writes the block the same
// way), and the new boot gets a new boot id.
func (r *grubRoot) bootAs(t testing.TB, bootID string) {
	t.Helper()
	if out, err := exec.Command("grub-editenv", filepath.Join(r.grubDir, "grubenv"), "unset", "next_entry").CombinedOutput(); err != nil {
		t.Fatalf("grub-editenv unset: %v\n%s", err, out)
	}
	writeFile(t, r.bootID, bootID+"\n", 0o644)
}

// aptLab is the apt lab of host/aptlab (a throwaway apt repository and
// dpkg root driven by the real apt-get and dpkg through APT_CONFIG and
// DPKG_ADMINDIR; see aptlab.Lab for its packages), with the names these
// tests use.
type aptLab struct {
	*aptlab.Lab
	dir, root, aptConf, admin string
}

type debPkg struct {
	name, version string
	fields        []string
}

func newAptLab(t testing.TB, extraConf string) *aptLab {
	t.Helper()
	l := aptlab.New(t, aptlab.Options{ExtraConf: extraConf})
	return &aptLab{Lab: l, dir: l.Dir, root: l.Root, aptConf: l.AptConf, admin: l.Admin}
}

func (l *aptLab) buildDeb(t testing.TB, repo string, p debPkg) string {
	t.Helper()
	return l.BuildDeb(t, repo, aptlab.Package{Name: p.name, Version: p.version, Fields: p.fields})
}

func (l *aptLab) paths() Paths { return Paths{AptConfig: l.aptConf, DpkgAdminDir: l.admin} }

// aptGet runs the real apt-get against the lab.
func (l *aptLab) aptGet(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command("apt-get", args...)
	cmd.Env = append(os.Environ(), "APT_CONFIG="+l.aptConf, "LC_ALL=C")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("apt-get %v: %v", args, err)
	}
	return string(out)
}

// installedVersion reads the lab's dpkg status with the real dpkg-query.
func (l *aptLab) installedVersion(t testing.TB, pkg string) string {
	t.Helper()
	out, _ := exec.Command("dpkg-query", "--admindir="+l.admin, "-W", "-f=${Version} ${db:Status-Abbrev}", pkg).Output()
	return strings.TrimSpace(string(out))
}

func newSteps(t testing.TB, p Paths, stubs string) *Steps {
	t.Helper()
	path := DefaultPath
	if stubs != "" {
		path = stubs + ":" + DefaultPath
	}
	return &Steps{Runner: &LocalRunner{Path: path}, Paths: p}
}

func merge(ps ...Paths) Paths {
	var out Paths
	for _, p := range ps {
		for _, f := range []struct {
			dst *string
			src string
		}{
			{&out.GrubCfg, p.GrubCfg}, {&out.GrubDir, p.GrubDir}, {&out.GrubDefaults, p.GrubDefaults}, {&out.GrubDropin, p.GrubDropin},
			{&out.BootIDFile, p.BootIDFile}, {&out.ProcUptime, p.ProcUptime}, {&out.ProcSys, p.ProcSys}, {&out.ProcMdstat, p.ProcMdstat},
			{&out.RebootRequired, p.RebootRequired}, {&out.ProcDriverNvidia, p.ProcDriverNvidia}, {&out.ProcNvswitch, p.ProcNvswitch},
			{&out.ModulesDir, p.ModulesDir}, {&out.BackupDir, p.BackupDir}, {&out.StateDir, p.StateDir}, {&out.EtcDir, p.EtcDir},
			{&out.EtcKubernetes, p.EtcKubernetes}, {&out.EtcdDataDir, p.EtcdDataDir}, {&out.ProcBonding, p.ProcBonding},
			{&out.SysInfiniband, p.SysInfiniband}, {&out.SystemdDir, p.SystemdDir}, {&out.AptConfig, p.AptConfig}, {&out.DpkgAdminDir, p.DpkgAdminDir},
		} {
			if f.src != "" {
				*f.dst = f.src
			}
		}
	}
	return out
}

// waitFor polls cond for up to 20 s.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 20 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func execOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
