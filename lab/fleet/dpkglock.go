package fleet

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// dpkgLockFile is dpkg's frontend lock inside a host root, the file the
// emulated apt locks (flock) and names the holder of (through .pid).
const dpkgLockFile = "/var/lib/dpkg/lock-frontend"

// holdDpkgLock starts a real process that takes the host's dpkg lock and
// keeps it until releaseDpkgLock (or the fleet closes). It returns once the
// lock is held.
func (h *Host) holdDpkgLock() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.lockHolder != nil {
		return nil
	}
	p := h.m.Path(dpkgLockFile)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	flock, err := exec.LookPath("flock")
	if err != nil {
		return fmt.Errorf("dpkg-locked needs flock(1): %w", err)
	}
	// The lock file exists before the holder starts (as dpkg's does), so
	// the check below never races flock(1) creating it. The lock is held
	// once a non-blocking flock of our own fails.
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := exec.Command(flock, "--exclusive", p, "sleep", "86400")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the dpkg lock holder: %w", err)
	}
	if err := os.WriteFile(p+".pid", []byte(strconv.Itoa(cmd.Process.Pid)), 0o640); err != nil {
		return errors.Join(err, killGroup(cmd))
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			break
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN); err != nil {
			return errors.Join(err, killGroup(cmd))
		}
		if time.Now().After(deadline) {
			return errors.Join(errors.New("the dpkg lock holder did not take the lock within 30s"), killGroup(cmd))
		}
		time.Sleep(50 * time.Millisecond)
	}
	h.lockHolder = cmd
	return nil
}

// releaseDpkgLock ends the lock holder started by holdDpkgLock.
func (h *Host) releaseDpkgLock() error {
	h.mu.Lock()
	cmd := h.lockHolder
	h.lockHolder = nil
	h.mu.Unlock()
	if cmd == nil {
		return nil
	}
	err := killGroup(cmd)
	if rerr := os.Remove(h.m.Path(dpkgLockFile) + ".pid"); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = errors.Join(err, rerr)
	}
	return err
}

func killGroup(cmd *exec.Cmd) error {
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop pid %d: %w", cmd.Process.Pid, err)
	}
	// Wait reports the kill itself; the process is gone either way.
	_ = cmd.Wait()
	return nil
}
