package plan

import (
	"slices"
	"testing"
)

// The NVIDIA packages a node's upgrade installs, from apt's packages
// (NvidiaMoves) and read back from the plan's lines (NvidiaInstalled),
// agree; removals and other classes are not installs.
func TestNvidiaMovesAndInstalled(t *testing.T) {
	pkgs := []Package{
		{Name: "nvidia-driver-550", Action: "upgrade", OldVersion: "550.90.07-0ubuntu1", NewVersion: "550.127.05-0ubuntu1", Class: "nvidia"},
		{Name: "linux-modules-nvidia-550-6.8.0-51-generic", Action: "install", NewVersion: "6.8.0-51.52", Class: "nvidia"},
		{Name: "nvidia-dkms-535", Action: "remove", OldVersion: "535.1", Class: "nvidia"},
		{Name: "linux-image-6.8.0-51-generic", Action: "install", NewVersion: "6.8.0-51.52", Class: "kernel"},
		{Name: "nvidia-driver-550", Action: "upgrade", OldVersion: "550.90.07-0ubuntu1", NewVersion: "550.127.05-0ubuntu1", Class: "nvidia"},
	}
	want := []string{"linux-modules-nvidia-550-6.8.0-51-generic 6.8.0-51.52", "nvidia-driver-550 550.127.05-0ubuntu1"}
	if got := NvidiaMoves(pkgs); !slices.Equal(got, want) {
		t.Fatalf("NvidiaMoves = %q, want %q", got, want)
	}
	var lines []string
	for _, p := range pkgs {
		if p.Class == "nvidia" {
			lines = append(lines, packageLine(p))
		}
	}
	if got := NvidiaInstalled(lines); !slices.Equal(got, want) {
		t.Fatalf("NvidiaInstalled(%q) = %q, want %q", lines, got, want)
	}
	if got := NvidiaInstalled([]string{"", "garbage", "x 1 -> "}); len(got) != 0 {
		t.Fatalf("NvidiaInstalled of lines that install nothing = %q", got)
	}
}
