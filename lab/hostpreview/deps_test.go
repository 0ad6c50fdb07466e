package hostpreview

import (
	"os/exec"
	"strings"
	"testing"
)

// maxPreviewPackages bounds lab-preview's dependency graph (206 packages
// when this was written, 162 of them the standard library): it is what a
// first run compiles before the product shows.
const maxPreviewPackages = 260

// TestPreviewStaysSmall: lab/cmd/lab-preview links none of the Kubernetes
// clients, go-git or the MCP SDK, and stays within maxPreviewPackages, so a
// first run's first screen does not wait for mcp-patch's compile.
func TestPreviewStaysSmall(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../cmd/lab-preview").Output()
	if err != nil {
		t.Fatalf("go list -deps ../cmd/lab-preview: %v", err)
	}
	pkgs := strings.Fields(string(out))
	forbidden := []string{"k8s.io/client-go/", "k8s.io/api/", "github.com/go-git/", "github.com/modelcontextprotocol/",
		"github.com/mcp-patch/mcp-patch/tools", "github.com/mcp-patch/mcp-patch/kube", "github.com/mcp-patch/mcp-patch/intent"}
	for _, p := range pkgs {
		for _, f := range forbidden {
			if strings.HasPrefix(p+"/", f) || strings.HasPrefix(p, f) {
				t.Errorf("lab-preview links %s (nothing under %s may be linked)", p, f)
			}
		}
	}
	if len(pkgs) > maxPreviewPackages {
		t.Errorf("lab-preview depends on %d packages, more than %d", len(pkgs), maxPreviewPackages)
	}
}
