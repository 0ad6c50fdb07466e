package steps

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFallbackDrillArmAndDisarm runs fallback_drill.sh with a real shell
// against a temporary root: arming writes the one-shot unit (after
// systemd-sysctl, only on the drill kernel, only while armed) and enables
// it; disarming removes everything; bad input changes nothing.
func TestFallbackDrillArmAndDisarm(t *testing.T) {
	root := t.TempDir()
	s := &Steps{Runner: &LocalRunner{}, Paths: Paths{StateDir: filepath.Join(root, "state"), EtcDir: filepath.Join(root, "etc")}}
	ctx := context.Background()
	if _, err := s.FallbackDrill(ctx, "n1", DrillArm, "2026-11", "6.8; reboot"); !errors.Is(err, ErrBadInput) {
		t.Fatalf("bad kernel: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "etc")); err == nil {
		t.Fatal("bad input changed the root")
	}
	st, err := s.FallbackDrill(ctx, "n1", DrillArm, "2026-11", "6.8.0-51-generic")
	if err != nil || !st.Armed || st.DrillKernel != "6.8.0-51-generic" || st.Fired {
		t.Fatalf("arm: %+v %v", st, err)
	}
	unit, err := os.ReadFile(filepath.Join(root, "etc/systemd/system/mcp-patch-fallback-drill.service"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"After=systemd-sysctl.service", "ConditionKernelVersion=6.8.0-51-generic",
		"ConditionPathExists=" + filepath.Join(root, "state/fallback-drill.armed"), "echo c > /proc/sysrq-trigger", "WantedBy=multi-user.target"} {
		if !strings.Contains(string(unit), want) {
			t.Errorf("unit lacks %q:\n%s", want, unit)
		}
	}
	link, err := os.Readlink(filepath.Join(root, "etc/systemd/system/multi-user.target.wants/mcp-patch-fallback-drill.service"))
	if err != nil || link != "../mcp-patch-fallback-drill.service" {
		t.Fatalf("not enabled: %q %v", link, err)
	}
	st, err = s.FallbackDrill(ctx, "n1", DrillDisarm, "", "")
	if err != nil || st.Armed {
		t.Fatalf("disarm: %+v %v", st, err)
	}
	for _, p := range []string{"etc/systemd/system/mcp-patch-fallback-drill.service", "etc/systemd/system/multi-user.target.wants/mcp-patch-fallback-drill.service", "state/fallback-drill.armed"} {
		if _, err := os.Lstat(filepath.Join(root, p)); err == nil {
			t.Errorf("%s left after disarm", p)
		}
	}
}
