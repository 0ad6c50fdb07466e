// Package registry runs the lab's OCI registry: Debian's docker-registry
// (the CNCF distribution) on a loopback port, its storage in a folder of
// its own, and images pushed into it with the real skopeo. The lab keeps
// the GPU Operator's precompiled driver images there, one tag per kernel,
// and the driver-image check asks it as it asks nvcr.io.
package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/crypto/bcrypt"
)

// Registry is one running docker-registry.
type Registry struct {
	// Addr is host:port on loopback; URL is http://Addr.
	Addr, URL string
	// User and Password, when set, are the one htpasswd login it takes.
	User, Password string

	dir  string
	cmd  *exec.Cmd
	log  *os.File
	done chan error
}

// Options for Start.
type Options struct {
	// Dir holds the configuration, the storage and the log.
	Dir string
	// User and Password turn on htpasswd logins.
	User, Password string
	// Ready bounds the wait for the registry to answer (default 1 min).
	Ready time.Duration
}

// Start runs docker-registry and waits until it answers /v2/.
func Start(ctx context.Context, o Options) (*Registry, error) {
	for _, bin := range []string{"docker-registry", "skopeo"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("%s is not installed (scripts/setup.sh installs it): %w", bin, err)
		}
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	r := &Registry{Addr: addr, URL: "http://" + addr, User: o.User, Password: o.Password, dir: o.Dir, done: make(chan error, 1)}
	auth := ""
	if o.User != "" {
		h, err := bcrypt.GenerateFromPassword([]byte(o.Password), bcrypt.DefaultCost)
		if err != nil {
			return nil, err
		}
		hp := filepath.Join(o.Dir, "htpasswd")
		if err := os.WriteFile(hp, []byte(o.User+":"+string(h)+"\n"), 0o600); err != nil {
			return nil, err
		}
		auth = fmt.Sprintf("auth:\n  htpasswd:\n    realm: lab-registry\n    path: %s\n", hp)
	}
	// Deletes are on: a tag is withdrawn as a publisher withdraws an image
	// (the lab's driver-image-missing fault).
	cfg := fmt.Sprintf("version: 0.1\nlog:\n  level: warn\nstorage:\n  delete:\n    enabled: true\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n%s",
		filepath.Join(o.Dir, "data"), addr, auth)
	cfgPath := filepath.Join(o.Dir, "config.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	if r.log, err = os.Create(filepath.Join(o.Dir, "registry.log")); err != nil {
		return nil, err
	}
	r.cmd = exec.Command("docker-registry", "serve", cfgPath)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		return nil, errors.Join(fmt.Errorf("start docker-registry: %w", err), r.log.Close())
	}
	go func() { r.done <- r.cmd.Wait() }()
	wait := o.Ready
	if wait <= 0 {
		wait = time.Minute
	}
	deadline := time.Now().Add(wait)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.URL+"/v2/", nil)
		if err != nil {
			return nil, errors.Join(err, r.Stop())
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			if cerr := resp.Body.Close(); cerr != nil {
				return nil, errors.Join(cerr, r.Stop())
			}
			if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusUnauthorized {
				return r, nil
			}
		}
		select {
		case werr := <-r.done:
			b, _ := os.ReadFile(filepath.Join(o.Dir, "registry.log")) // best effort: the exit is the error
			return nil, fmt.Errorf("docker-registry exited: %v: %s", werr, b)
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), r.Stop())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return nil, errors.Join(fmt.Errorf("docker-registry on %s did not answer within %s: %v", addr, wait, err), r.Stop())
		}
	}
}

// Stop ends the registry (its process only) and closes its log.
func (r *Registry) Stop() error {
	if r.cmd == nil || r.cmd.Process == nil {
		return nil
	}
	var kerr error
	select {
	case <-r.done:
	default:
		if err := r.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			kerr = err
		}
		<-r.done
	}
	r.cmd = nil
	return errors.Join(kerr, r.log.Close())
}

// Push copies a small one-layer image to repository:tag with skopeo. Each
// tag gets an image of its own (its config names the tag), so deleting one
// tag's manifest leaves the others.
func (r *Registry) Push(ctx context.Context, repository, tag string) error {
	layout := filepath.Join(r.dir, "images", repository, tag)
	if err := writeLayout(layout, repository+":"+tag); err != nil {
		return err
	}
	args := []string{"copy", "--insecure-policy", "--dest-tls-verify=false"}
	if r.User != "" {
		args = append(args, "--dest-creds", r.User+":"+r.Password)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	dest := "docker://" + r.Addr + "/" + repository + ":" + tag
	out, err := exec.CommandContext(ctx, "skopeo", append(args, "oci:"+layout+":image", dest)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("skopeo copy to %s: %w: %s", dest, err, out)
	}
	return nil
}

// Delete withdraws repository:tag with skopeo (the registry deletes the
// tag's manifest; its tag list no longer names it).
func (r *Registry) Delete(ctx context.Context, repository, tag string) error {
	args := []string{"delete", "--tls-verify=false"}
	if r.User != "" {
		args = append(args, "--creds", r.User+":"+r.Password)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	ref := "docker://" + r.Addr + "/" + repository + ":" + tag
	out, err := exec.CommandContext(ctx, "skopeo", append(args, ref)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("skopeo delete %s: %w: %s", ref, err, out)
	}
	return nil
}

// writeLayout writes a one-layer image (an empty tar) as an OCI image
// layout tagged "image", its config labelled with name.
func writeLayout(dir, name string) error {
	blobs := filepath.Join(dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return err
	}
	blob := func(b []byte) (string, int, error) {
		sum := sha256.Sum256(b)
		h := hex.EncodeToString(sum[:])
		return "sha256:" + h, len(b), os.WriteFile(filepath.Join(blobs, h), b, 0o644)
	}
	layer, layerSize, err := blob(make([]byte, 1024)) // a tar of no entries: two zero blocks
	if err != nil {
		return err
	}
	cfg, cfgSize, err := blob(fmt.Appendf(nil, `{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[%q]},"config":{"Labels":{"org.opencontainers.image.ref.name":%q}}}`, layer, name))
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg, "size": cfgSize},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": layerSize}},
	})
	if err != nil {
		return err
	}
	md, mSize, err := blob(manifest)
	if err != nil {
		return err
	}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{map[string]any{
		"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": mSize,
		"annotations": map[string]string{"org.opencontainers.image.ref.name": "image"}}}})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "index.json"), index, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644)
}

// freeAddr is a loopback address nothing listens on now.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	return addr, l.Close()
}
