package cluster

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/mcp-patch/mcp-patch/scripts"
)

// The pinning modules of lab/controlplane, copied here because go:embed
// cannot reach into another module (each of them has its own go.mod). The
// test of this package fails when a copy differs from its source.
//
//go:generate cp ../controlplane/etcd/go.mod pins/etcd/go.mod.pin
//go:generate cp ../controlplane/etcd/go.sum pins/etcd/go.sum.pin
//go:generate cp ../controlplane/etcd/main.go pins/etcd/main.go.pin
//go:generate cp ../controlplane/kube/go.mod pins/kube/go.mod.pin
//go:generate cp ../controlplane/kube/go.sum pins/kube/go.sum.pin
//go:generate cp ../controlplane/kube/main.go pins/kube/main.go.pin
//go:generate cp ../controlplane/kube/controllermanager.go pins/kube/controllermanager.go.pin
//go:generate cp ../controlplane/kube/kubectl/main.go pins/kube/kubectl/main.go.pin

// pins holds pins/<module>/<file>.pin for each file of
// lab/controlplane/<module> that the build script hashes into its cache key.
//
//go:embed pins
var pins embed.FS

// pinSuffix is added to each copied file's name (a go.mod or .go file here
// would be a module or source of its own).
const pinSuffix = ".pin"

// writeBuildTree writes the build script and the pinning modules this
// binary was built with into a fresh directory laid out as the repository
// is (scripts/build-controlplane.sh, lab/controlplane/<module>/...), so a
// binary installed anywhere runs the same build, under the same cache key,
// as a clone: the script hashes the files by their place under
// lab/controlplane and their content, both the same here. The caller
// removes the directory.
func writeBuildTree() (root string, err error) {
	root, err = os.MkdirTemp("", "mcp-patch-controlplane-src-")
	if err != nil {
		return "", fmt.Errorf("write control-plane build sources: %w", err)
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("write control-plane build sources: %w", err)
			if rmErr := os.RemoveAll(root); rmErr != nil {
				err = fmt.Errorf("%w (and removing %s: %v)", err, root, rmErr)
			}
			root = ""
		}
	}()
	files := map[string][]byte{buildScript: scripts.BuildControlPlane}
	err = fs.WalkDir(pins, "pins", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := pins.ReadFile(p)
		if err != nil {
			return err
		}
		rel := strings.TrimSuffix(strings.TrimPrefix(p, "pins/"), pinSuffix)
		files[path.Join("lab/controlplane", rel)] = b
		return nil
	})
	if err != nil {
		return root, err
	}
	for rel, b := range files {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return root, err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return root, err
		}
	}
	return root, nil
}
