package cluster

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
)

// AnnotationContainerFails is the pod annotation the lab's own kwok stage
// (stages/pod-container-fails.yaml) reads: a pod that carries it runs but
// never becomes Ready, its containers waiting for the annotation's value
// (CrashLoopBackOff, ImagePullBackOff, ...).
const AnnotationContainerFails = "lab.mcp-patch.io/container-fails"

//go:embed stages/*.yaml
var labStages embed.FS

// writeLabStages writes the lab's own kwok stages into dir and returns
// their paths, for kwok's --config beside its default stages.
func writeLabStages(dir string) ([]string, error) {
	ents, err := labStages.ReadDir("stages")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("lab stages: %w", err)
	}
	var out []string
	for _, e := range ents {
		b, err := labStages.ReadFile("stages/" + e.Name())
		if err != nil {
			return nil, err
		}
		p := filepath.Join(dir, "lab-"+e.Name())
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return nil, fmt.Errorf("lab stages: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}
