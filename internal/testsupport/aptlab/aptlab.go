// Package aptlab builds, for tests, a throwaway Debian package world driven
// by the real apt-get and dpkg of this Debian machine: a local apt
// repository, apt's state and cache, and a dpkg root and admin directory,
// all in a temp dir and named by APT_CONFIG and DPKG_ADMINDIR, so nothing
// touches the machine's own package state. A host step run with those two
// variables (by a LocalRunner, or over a real sshd that sets them for its
// logins) sees this world as its node's packages.
//
// It must not be imported by production code.
package aptlab

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Options shape a lab. The zero value is the upgrade described on Lab.
type Options struct {
	// NoRemoval leaves out what makes the upgrade remove a package
	// (tinyapp 2.0's dependency on newlib, which conflicts with oldlib).
	NoRemoval bool
	// Copy serves the repository through apt's copy: method, which copies
	// each package into apt's cache as a download from a mirror does
	// (file:, the default, uses the packages where they lie).
	Copy bool
	// ExtraConf is appended to apt.conf.
	ExtraConf string
}

// Lab is one apt world.
//
// Installed: tinyapp 1.0, oldlib 1.0, kubelet 1.0 (held),
// linux-image-generic 1.0, linux-image-<running kernel> (automatically
// installed), leftover 1.0 (automatically installed, nothing needs it).
// Available: tinyapp 2.0 (depends on newlib, unless NoRemoval), newlib 1.0
// (conflicts with and replaces oldlib), kubelet 2.0, linux-image-generic 2.0
// (depends on linux-image-9.9.9-1-generic), linux-image-9.9.9-1-generic.
type Lab struct {
	// Dir holds everything; Root is dpkg's root, Admin its admin
	// directory (DPKG_ADMINDIR) and AptConf apt's configuration
	// (APT_CONFIG).
	Dir, Root, Admin, AptConf string
	// NewKernel is the kernel release the upgrade installs.
	NewKernel string
}

// Package is a .deb the lab builds.
type Package struct {
	Name, Version string
	Fields        []string
}

// New builds a lab and runs the real `apt-get update` against it.
func New(t testing.TB, opts Options) *Lab {
	t.Helper()
	for _, tool := range []string{"apt-get", "dpkg-deb", "dpkg"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("aptlab: %s is needed: %v", tool, err)
		}
	}
	l := &Lab{Dir: t.TempDir(), NewKernel: "9.9.9-1-generic"}
	l.Root = filepath.Join(l.Dir, "root")
	l.Admin = filepath.Join(l.Root, "var", "lib", "dpkg")
	repo := filepath.Join(l.Dir, "repo")
	for _, d := range []string{repo, filepath.Join(l.Admin, "info"), filepath.Join(l.Admin, "updates"), filepath.Join(l.Admin, "triggers"),
		filepath.Join(l.Dir, "state", "lists", "partial"), filepath.Join(l.Dir, "cache", "archives", "partial"),
		filepath.Join(l.Dir, "etc", "parts"), filepath.Join(l.Dir, "etc", "prefs"), filepath.Join(l.Dir, "log")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	running := RunningKernel(t)
	tiny2 := []string{"Depends: newlib"}
	if opts.NoRemoval {
		tiny2 = nil
	}
	available := []Package{
		{"tinyapp", "1.0", nil}, {"tinyapp", "2.0", tiny2},
		{"oldlib", "1.0", nil}, {"newlib", "1.0", []string{"Conflicts: oldlib", "Replaces: oldlib"}},
		{"kubelet", "1.0", nil}, {"kubelet", "2.0", nil},
		{"linux-image-generic", "1.0", []string{"Depends: linux-image-" + running}},
		{"linux-image-generic", "2.0", []string{"Depends: linux-image-" + l.NewKernel}},
		{"linux-image-" + l.NewKernel, "9.9.9-1.1", nil},
		{"linux-image-" + running, "1.0", nil},
		{"leftover", "1.0", nil},
	}
	var packages strings.Builder
	for _, p := range available {
		deb := l.BuildDeb(t, repo, p)
		data, err := os.ReadFile(deb)
		if err != nil {
			t.Fatal(err)
		}
		control, err := exec.Command("dpkg-deb", "-f", deb).Output()
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		fmt.Fprintf(&packages, "%sFilename: ./%s\nSize: %d\nSHA256: %s\n\n", control, filepath.Base(deb), len(data), hex.EncodeToString(sum[:]))
	}
	WriteFile(t, filepath.Join(repo, "Packages"), packages.String(), 0o644)
	psum := sha256.Sum256([]byte(packages.String()))
	WriteFile(t, filepath.Join(repo, "Release"), fmt.Sprintf("Origin: mcp-lab\nLabel: mcp-lab\nSuite: lab\nCodename: lab\nSHA256:\n %s %d Packages\n",
		hex.EncodeToString(psum[:]), packages.Len()), 0o644)
	method := "file:"
	if opts.Copy {
		method = "copy:"
	}
	WriteFile(t, filepath.Join(l.Dir, "etc", "sources.list"), "deb [trusted=yes] "+method+repo+" ./\n", 0o644)

	var status strings.Builder
	for _, p := range []struct{ name, version, want string }{
		{"tinyapp", "1.0", "install"}, {"oldlib", "1.0", "install"}, {"kubelet", "1.0", "hold"},
		{"linux-image-generic", "1.0", "install"}, {"linux-image-" + running, "1.0", "install"}, {"leftover", "1.0", "install"},
	} {
		fmt.Fprintf(&status, "Package: %s\nStatus: %s ok installed\nPriority: optional\nSection: misc\nMaintainer: lab <lab@example.invalid>\nArchitecture: all\nVersion: %s\nDescription: lab package\n", p.name, p.want, p.version)
		if p.name == "linux-image-generic" {
			fmt.Fprintf(&status, "Depends: linux-image-%s\n", running)
		}
		status.WriteString("\n")
		WriteFile(t, filepath.Join(l.Admin, "info", p.name+".list"), "", 0o644)
	}
	WriteFile(t, filepath.Join(l.Admin, "status"), status.String(), 0o644)
	WriteFile(t, filepath.Join(l.Dir, "state", "extended_states"),
		"Package: linux-image-"+running+"\nArchitecture: all\nAuto-Installed: 1\n\nPackage: leftover\nArchitecture: all\nAuto-Installed: 1\n\n", 0o644)

	l.AptConf = filepath.Join(l.Dir, "apt.conf")
	WriteFile(t, l.AptConf, fmt.Sprintf(`Dir::State "%[1]s/state";
Dir::State::status "%[2]s/status";
Dir::Cache "%[1]s/cache";
Dir::Etc::SourceList "%[1]s/etc/sources.list";
Dir::Etc::SourceParts "%[1]s/etc/parts";
Dir::Etc::Parts "%[1]s/etc/parts";
Dir::Etc::Preferences "%[1]s/etc/prefs/none";
Dir::Etc::PreferencesParts "%[1]s/etc/prefs";
Dir::Log "%[1]s/log";
DPkg::Options { "--root=%[3]s"; "--admindir=%[2]s"; "--log=%[1]s/log/dpkg.log"; "--force-not-root"; "--force-script-chrootless"; };
APT::Sandbox::User "root";
%[4]s
`, l.Dir, l.Admin, l.Root, opts.ExtraConf), 0o644)
	cmd := l.Command("apt-get", "update")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("aptlab: apt-get update: %v\n%s", err, out)
	}
	return l
}

// BuildDeb builds p with the real dpkg-deb into repo and returns its path.
func (l *Lab) BuildDeb(t testing.TB, repo string, p Package) string {
	t.Helper()
	b := filepath.Join(l.Dir, "build", p.Name+"-"+p.Version)
	control := fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: lab <lab@example.invalid>\nDescription: lab package %s\n", p.Name, p.Version, p.Name)
	for _, f := range p.Fields {
		control += f + "\n"
	}
	WriteFile(t, filepath.Join(b, "DEBIAN", "control"), control, 0o644)
	WriteFile(t, filepath.Join(b, "usr", "share", "mcp-lab", p.Name), p.Version+"\n", 0o644)
	deb := filepath.Join(repo, p.Name+"_"+p.Version+"_all.deb")
	if out, err := exec.Command("dpkg-deb", "--build", "--root-owner-group", b, deb).CombinedOutput(); err != nil {
		t.Fatalf("aptlab: dpkg-deb: %v\n%s", err, out)
	}
	return deb
}

// Env is the environment that points apt and dpkg at the lab.
func (l *Lab) Env() map[string]string {
	return map[string]string{"APT_CONFIG": l.AptConf, "DPKG_ADMINDIR": l.Admin}
}

// Command is the real name run against the lab (LC_ALL=C).
func (l *Lab) Command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "APT_CONFIG="+l.AptConf, "DPKG_ADMINDIR="+l.Admin, "LC_ALL=C")
	return cmd
}

// Interrupt leaves what dpkg leaves behind when it is killed half-way: an
// entry in its journal (updates/), written from the real dpkg-query.
func (l *Lab) Interrupt(t testing.TB) {
	t.Helper()
	out, err := l.Command("dpkg-query", "-s", "tinyapp").Output()
	if err != nil {
		t.Fatalf("aptlab: dpkg-query: %v", err)
	}
	WriteFile(t, filepath.Join(l.Admin, "updates", "0000"), string(out), 0o644)
}

// Repair takes the journal entry Interrupt left away again.
func (l *Lab) Repair(t testing.TB) {
	t.Helper()
	if err := os.Remove(filepath.Join(l.Admin, "updates", "0000")); err != nil {
		t.Fatal(err)
	}
}

// RunningKernel is `uname -r`.
func RunningKernel(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("uname", "-r").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// WriteFile writes content to path, making its directories.
func WriteFile(t testing.TB, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}
