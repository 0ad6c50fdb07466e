package vm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeImageDir(t *testing.T, env string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"image.env":                env,
		"ssh_host_ed25519_key.pub": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDlab root@canary\n",
		"disk.qcow2":               "",
		"id_ed25519":               "",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoadImage(t *testing.T) {
	dir := writeImageDir(t, "KEY=abc\nOLD_KERNEL=6.1.0-50-amd64\nNEW_KERNEL=6.1.0-57-amd64\n# a comment\nROOT_UUID=69150ccf\nSECONDS=483\n")
	img, err := LoadImage(dir)
	if err != nil {
		t.Fatal(err)
	}
	if img.OldKernel != "6.1.0-50-amd64" || img.NewKernel != "6.1.0-57-amd64" || img.RootUUID != "69150ccf" || img.BuildSeconds != "483" {
		t.Errorf("image %+v", img)
	}
	if img.HostKey != "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIDlab" {
		t.Errorf("host key %q (the comment must go)", img.HostKey)
	}
}

func TestLoadImageRefusesAnIncompleteImage(t *testing.T) {
	dir := writeImageDir(t, "OLD_KERNEL=6.1.0-50-amd64\nROOT_UUID=x\n")
	if _, err := LoadImage(dir); err == nil || !strings.Contains(err.Error(), "NEW_KERNEL") {
		t.Fatalf("got %v", err)
	}
	dir = writeImageDir(t, "OLD_KERNEL=a\nNEW_KERNEL=b\nROOT_UUID=c\n")
	if err := os.Remove(filepath.Join(dir, "disk.qcow2")); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadImage(dir); err == nil || !strings.Contains(err.Error(), "disk.qcow2") {
		t.Fatalf("without a disk: got %v", err)
	}
}
