package vm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

func TestBootRefusesUEFIWithoutVariablesAndUnknownFirmware(t *testing.T) {
	dir := writeImageDir(t, "OLD_KERNEL=a\nNEW_KERNEL=b\nROOT_UUID=c\n")
	img, err := LoadImage(dir)
	if err != nil {
		t.Fatal(err)
	}
	for fw, want := range map[Firmware]string{UEFI: "no UEFI variables", "coreboot": "neither"} {
		out := t.TempDir()
		if _, err := Boot(context.Background(), img, Options{Dir: out, Firmware: fw, Port: 1}); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("firmware %s: got %v, want an error with %q", fw, err, want)
		}
		if left, _ := os.ReadDir(out); len(left) != 0 {
			t.Errorf("firmware %s: a refused boot left %v", fw, left)
		}
	}
}

func TestLoadImageWithUEFIVariables(t *testing.T) {
	code := filepath.Join(t.TempDir(), "OVMF_CODE.fd")
	if err := os.WriteFile(code, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := writeImageDir(t, "OLD_KERNEL=a\nNEW_KERNEL=b\nROOT_UUID=c\nOVMF_CODE="+code+"\n")
	if _, err := LoadImage(dir); err == nil || !strings.Contains(err.Error(), "OVMF_VARS.fd") {
		t.Fatalf("without the variables file: got %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "OVMF_VARS.fd"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	img, err := LoadImage(dir)
	if err != nil || img.OVMFCode != code || img.OVMFVars != filepath.Join(dir, "OVMF_VARS.fd") {
		t.Fatalf("got %+v %v", img, err)
	}
}

func TestWaitForStopsAtAPermanentError(t *testing.T) {
	v := &VM{Name: "canary", SerialLog: filepath.Join(t.TempDir(), "serial.log"), exited: make(chan struct{})}
	calls := 0
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := v.WaitFor(ctx, "a boot", func(context.Context) error {
		calls++
		if calls < 2 {
			return errors.New("not yet")
		}
		return Permanent(errors.New("panicked twice"))
	})
	if err == nil || !strings.Contains(err.Error(), "panicked twice") || ctx.Err() != nil || calls != 2 {
		t.Fatalf("got %v after %d calls (ctx %v)", err, calls, ctx.Err())
	}
}
