package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/lab"
)

// lab up and lab demo --dir on a directory that is not a lab's refuse and
// remove nothing (the current directory included).
func TestLabDirNotALabIsRefused(t *testing.T) {
	for _, sub := range []string{"up", "demo"} {
		t.Run(sub, func(t *testing.T) {
			dir := t.TempDir()
			keep := filepath.Join(dir, "important.txt")
			if err := os.WriteFile(keep, []byte("keep me"), 0o600); err != nil {
				t.Fatal(err)
			}
			code, _, errOut := run(t, "", nil, "lab", sub, "--dir", dir)
			if code != ExitNotOK || !strings.Contains(errOut, "not a lab directory") {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if b, err := os.ReadFile(keep); err != nil || string(b) != "keep me" {
				t.Errorf("the directory's file is gone or changed: %v %q", err, b)
			}
		})
	}
}

// lab up and lab demo refuse a VM canary shape they cannot start before
// they touch the lab directory.
func TestLabVMCanaryShapeIsRefusedFirst(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--vm-canary", "--canary", "2"}, "the canary count must be 1, not 2"},
		{[]string{"--vm-canary", "--vm-firmware", "coreboot"}, `not "coreboot"`},
	} {
		for _, sub := range []string{"up", "demo"} {
			t.Run(sub+" "+strings.Join(tc.args, " "), func(t *testing.T) {
				dir := t.TempDir()
				keep := filepath.Join(dir, "lab-file")
				if err := os.WriteFile(filepath.Join(dir, lab.MarkerFile), []byte("x"), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(keep, []byte("keep me"), 0o600); err != nil {
					t.Fatal(err)
				}
				code, _, errOut := run(t, "", nil, append([]string{"lab", sub, "--dir", dir}, tc.args...)...)
				if code != ExitUsage || !strings.Contains(errOut, tc.want) {
					t.Fatalf("exit %d, stderr %q; want %d and %q", code, errOut, ExitUsage, tc.want)
				}
				if b, err := os.ReadFile(keep); err != nil || string(b) != "keep me" {
					t.Errorf("the lab directory was touched: %v %q", err, b)
				}
			})
		}
	}
}

// lab demo --environments takes the month as --round, and refuses
// anything else before it touches the lab directory.
func TestLabDemoEnvironmentsRefusesARoundThatIsNotAMonth(t *testing.T) {
	for _, round := range []string{"staging-2026-12", "2026-13", "december"} {
		t.Run(round, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, lab.MarkerFile), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
			keep := filepath.Join(dir, "lab-file")
			if err := os.WriteFile(keep, []byte("keep me"), 0o600); err != nil {
				t.Fatal(err)
			}
			code, _, errOut := run(t, "", nil, "lab", "demo", "--environments", "--dir", dir, "--round", round)
			if code != ExitUsage || !strings.Contains(errOut, "--round is the month (YYYY-MM)") {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			if b, err := os.ReadFile(keep); err != nil || string(b) != "keep me" {
				t.Errorf("the lab directory was touched: %v %q", err, b)
			}
		})
	}
}

func TestControlError(t *testing.T) {
	for _, tc := range []struct {
		resp string
		err  error
		want string
	}{
		{"error: fault kernel-panic: name a lab host (--node), not \"x\"", nil, "fault kernel-panic: name a lab host (--node), not \"x\""},
		{"", errors.New("no running lab in /tmp/l"), "no running lab in /tmp/l"},
		{"partial", errors.New("read: connection reset"), "read: connection reset partial"},
	} {
		if got := controlError(tc.resp, tc.err); got != tc.want {
			t.Errorf("controlError(%q, %v) = %q, want %q", tc.resp, tc.err, got, tc.want)
		}
	}
}
