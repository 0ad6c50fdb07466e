package main

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// modulePath is the path the README's `go install` names.
const modulePath = "github.com/mcp-patch/mcp-patch"

// TestGoInstallFromProxy: the README's install command with the lab's
// binary beside it,
//
//	go install github.com/mcp-patch/mcp-patch/cmd/mcp-patch@VERSION github.com/mcp-patch/mcp-patch/cmd/mcp-patch-lab@VERSION
//
// run against a module proxy on disk (GOPROXY=file://...) that serves this
// repository's committed files as VERSION (one per content: treeVersion), its dependencies coming from the
// module cache's download directory (itself laid out as a proxy): the
// module path resolves, the module builds outside the repository with its
// own go.mod, and the installed binary runs its lab through the lab's
// binary, which carries the control-plane build script and pins (mcp-patch
// lab needs nothing else).
func TestGoInstallFromProxy(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go is not on PATH: %v", err)
	}
	root := repoRoot(t)
	proxy := t.TempDir()
	files := committedModuleFiles(t, root)
	version := treeVersion(t, root, files)
	writeProxyModule(t, proxy, root, version, files)

	modCache := goEnv(t, "GOMODCACHE")
	gobin := t.TempDir()
	cmd := exec.Command(goBin, "install", modulePath+"/cmd/mcp-patch@"+version, modulePath+"/cmd/mcp-patch-lab@"+version)
	cmd.Dir = t.TempDir() // outside any module: the install must not use this checkout
	cmd.Env = append(os.Environ(),
		"GOPROXY=file://"+proxy+",file://"+filepath.Join(modCache, "cache", "download"),
		"GOSUMDB=off", "GOFLAGS=", "GOWORK=off", "GOTOOLCHAIN=local", "GOBIN="+gobin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go install %s/cmd/mcp-patch@%s and cmd/mcp-patch-lab from the file proxy: %v\n%s", modulePath, version, err, out)
	}
	bin := filepath.Join(gobin, "mcp-patch")
	help, err := exec.Command(bin, "lab", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("installed mcp-patch lab --help: %v\n%s", err, help)
	}
	for _, want := range []string{"demo", "preview", "up"} {
		if !bytes.Contains(help, []byte(want)) {
			t.Errorf("installed mcp-patch lab --help lacks %q:\n%s", want, help)
		}
	}
	// The installed module is the proxy's, not this checkout.
	info, err := exec.Command(goBin, "version", "-m", bin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, info)
	}
	if !bytes.Contains(info, []byte("mod\t"+modulePath+"\t"+version)) {
		t.Errorf("go version -m does not name %s %s as the main module:\n%s", modulePath, version, info)
	}
}

func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse --show-toplevel: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// treeVersion is the version the file proxy serves the module as: one per
// content of its files (v0.99.0-0.tree<hash>), because the go command keeps
// every version it fetched in the shared module cache and never fetches it
// again: under one fixed version the test would install the first tree it
// ever served, not this one.
func treeVersion(t *testing.T, root string, files []string) string {
	t.Helper()
	h := sha256.New()
	for _, f := range append([]string{"go.mod"}, files...) {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", f, len(b))
		h.Write(b)
	}
	return "v0.99.0-0.tree" + hex.EncodeToString(h.Sum(nil))[:16]
}

// committedModuleFiles lists the committed files of the root module (git
// ls-files), leaving out the directories that are modules of their own, as
// a module zip does.
func committedModuleFiles(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	all := strings.Split(strings.TrimRight(string(out), "\x00"), "\x00")
	var nested []string
	for _, f := range all {
		if path.Base(f) == "go.mod" && f != "go.mod" {
			nested = append(nested, path.Dir(f)+"/")
		}
	}
	var files []string
next:
	for _, f := range all {
		for _, n := range nested {
			if strings.HasPrefix(f, n) {
				continue next
			}
		}
		if fi, err := os.Lstat(filepath.Join(root, f)); err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the working tree, or a link: not in a module zip
		}
		files = append(files, f)
	}
	if len(files) < 100 {
		t.Fatalf("only %d committed files in the module: %v", len(files), files)
	}
	return files
}

// writeProxyModule lays out modulePath@version in a GOPROXY directory:
// @v/list, .info, .mod and the .zip of files.
func writeProxyModule(t *testing.T, proxy, root, version string, files []string) {
	t.Helper()
	dir := filepath.Join(proxy, filepath.FromSlash(modulePath), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	info, err := json.Marshal(map[string]string{"Version": version, "Time": time.Now().UTC().Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	var zbuf bytes.Buffer
	zw := zip.NewWriter(&zbuf)
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			t.Fatal(err)
		}
		w, err := zw.Create(modulePath + "@" + version + "/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"list":            []byte(version + "\n"),
		version + ".info": info,
		version + ".mod":  gomod,
		version + ".zip":  zbuf.Bytes(),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
