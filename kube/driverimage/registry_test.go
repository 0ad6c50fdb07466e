package driverimage_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/mcp-patch/mcp-patch/kube/driverimage"
)

// The check against the real OCI registry Debian ships (docker-registry,
// the CNCF distribution), images pushed into it with the real skopeo: a
// tag present, a tag absent, a repository absent, paged tag lists, a
// registry that wants a login, and a registry that is down ("could not
// check", never present).
func TestCheckAgainstARealRegistry(t *testing.T) {
	for _, bin := range []string{"docker-registry", "skopeo"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is not installed (scripts/setup.sh installs it): %v", bin, err)
		}
	}
	ctx := t.Context()
	reg := startRegistry(t, "", "")
	layout := ociLayout(t)
	present := driverimage.Tag("535", "6.8.0-45-generic", "ubuntu22.04")
	for _, tag := range []string{present, driverimage.Tag("535", "6.8.0-40-generic", "ubuntu22.04"), "535.216.03-ubuntu22.04"} {
		push(t, layout, "docker://"+reg+"/nvidia/driver:"+tag, "")
	}
	im := driverimage.Image{Registry: "http://" + reg, Repository: "nvidia/driver"}
	c := driverimage.Checker{}

	if r := c.Check(ctx, im, present); r.Verdict != driverimage.Present || r.Tags != 3 {
		t.Fatalf("pushed tag: %+v, want present among 3", r)
	}
	missing := driverimage.Tag("535", "6.8.0-47-generic", "ubuntu22.04")
	if r := c.Check(ctx, im, missing); r.Verdict != driverimage.Absent || !strings.Contains(r.Reason, missing) {
		t.Fatalf("a kernel without an image: %+v, want absent naming the tag", r)
	}
	if r := c.Check(ctx, driverimage.Image{Registry: im.Registry, Repository: "nvidia/no-such-driver"}, present); r.Verdict != driverimage.Absent {
		t.Fatalf("no repository: %+v, want absent", r)
	}
	// distribution 2.8 answers the whole list in one page whatever ?n= asks
	// (paging is tested on the spec's Link header in paging_test.go).
	if tags, err := (driverimage.Checker{PageSize: 1}).Tags(ctx, im); err != nil || len(tags) != 3 {
		t.Fatalf("tag list asked in pages of 1: %v %v, want the 3 tags", tags, err)
	}
	if r := c.Check(ctx, im, "bad tag/with slash"); r.Verdict != driverimage.Uncertain {
		t.Fatalf("bad tag: %+v, want could not check", r)
	}

	// A registry that wants a login (htpasswd, Basic).
	sec := startRegistry(t, "puller", "s3cret-pass")
	push(t, layout, "docker://"+sec+"/nvidia/driver:"+present, "puller:s3cret-pass")
	secIm := driverimage.Image{Registry: "http://" + sec, Repository: "nvidia/driver", Username: "puller", Password: "s3cret-pass"}
	if r := c.Check(ctx, secIm, present); r.Verdict != driverimage.Present {
		t.Fatalf("with the login: %+v, want present", r)
	}
	secIm.Username, secIm.Password = "", ""
	if r := c.Check(ctx, secIm, present); r.Verdict != driverimage.Uncertain || !strings.Contains(r.Reason, "login") {
		t.Fatalf("without the login: %+v, want could not check, naming the login", r)
	}
	secIm.Username, secIm.Password = "puller", "wrong"
	if r := c.Check(ctx, secIm, present); r.Verdict != driverimage.Uncertain {
		t.Fatalf("a wrong login: %+v, want could not check", r)
	}

	// The registry goes down: never a pass.
	down := freeAddr(t)
	if r := c.Check(ctx, driverimage.Image{Registry: "http://" + down, Repository: "nvidia/driver"}, present); r.Verdict != driverimage.Uncertain || !strings.Contains(r.Reason, "could not check") {
		t.Fatalf("registry down: %+v, want could not check", r)
	}
}

// startRegistry runs docker-registry on a loopback port with its storage
// in a temporary folder; a user and password turn on htpasswd logins.
func startRegistry(t *testing.T, user, pass string) string {
	t.Helper()
	dir := t.TempDir()
	addr := freeAddr(t)
	auth := ""
	if user != "" {
		h, err := bcrypt.GenerateFromPassword([]byte(pass), bcrypt.DefaultCost)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "htpasswd"), []byte(user+":"+string(h)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		auth = fmt.Sprintf("auth:\n  htpasswd:\n    realm: test-realm\n    path: %s\n", filepath.Join(dir, "htpasswd"))
	}
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n%s",
		filepath.Join(dir, "data"), addr, auth)
	if err := os.WriteFile(filepath.Join(dir, "config.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("docker-registry", "serve", filepath.Join(dir, "config.yml"))
	logf, err := os.Create(filepath.Join(dir, "registry.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // our own child; Wait reaps it
		_ = cmd.Wait()
		_ = logf.Close()
	})
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return addr
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
			t.Fatalf("registry on %s did not answer: %v\n%s", addr, err, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// push copies the OCI layout's image to dest with the real skopeo.
func push(t *testing.T, layout, dest, creds string) {
	t.Helper()
	args := []string{"copy", "--insecure-policy", "--dest-tls-verify=false"}
	if creds != "" {
		args = append(args, "--dest-creds", creds)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "skopeo", append(args, "oci:"+layout+":driver", dest)...).CombinedOutput()
	if err != nil {
		t.Fatalf("skopeo copy to %s: %v\n%s", dest, err, out)
	}
}

// ociLayout writes a one-layer image as an OCI image layout.
func ociLayout(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		t.Fatal(err)
	}
	blob := func(b []byte) (string, int) {
		sum := sha256.Sum256(b)
		h := hex.EncodeToString(sum[:])
		if err := os.WriteFile(filepath.Join(blobs, h), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return "sha256:" + h, len(b)
	}
	layer, layerSize := blob(emptyTar())
	cfg, cfgSize := blob(fmt.Appendf(nil, `{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[%q]},"config":{}}`, layer))
	manifest, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg, "size": cfgSize},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": layerSize}},
	})
	md, mSize := blob(manifest)
	index, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{map[string]any{
		"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": mSize,
		"annotations": map[string]string{"org.opencontainers.image.ref.name": "driver"}}}})
	if err := os.WriteFile(filepath.Join(dir, "index.json"), index, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// emptyTar is a tar archive with no entries (two zero blocks).
func emptyTar() []byte { return make([]byte, 1024) }

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}
