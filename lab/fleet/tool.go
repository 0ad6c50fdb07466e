package fleet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// moduleRoot finds the module's source tree from this file's location.
func moduleRoot() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", errors.New("cannot locate the lab's source")
	}
	root := filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return "", fmt.Errorf("lab source not found at %s (set Options.ToolBinary to a built labtool): %w", root, err)
	}
	return root, nil
}

// toolSourceHash hashes everything labtool is built from: its own package,
// the emul and machine packages and the module files.
func toolSourceHash(root string) (string, error) {
	h := sha256.New()
	var files []string
	for _, dir := range []string{"lab/fleet/labtool", "lab/fleet/emul", "lab/fleet/machine"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if strings.HasSuffix(p, "_test.go") {
				return nil
			}
			files = append(files, p)
			return nil
		})
		if err != nil {
			return "", err
		}
	}
	files = append(files, filepath.Join(root, "go.mod"), filepath.Join(root, "go.sum"))
	slices.Sort(files)
	fmt.Fprintf(h, "%s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return "", err
		}
		rel, _ := filepath.Rel(root, f)
		fmt.Fprintf(h, "%s\n", rel)
		_, err = io.Copy(h, fh)
		fh.Close()
		if err != nil {
			return "", err
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:20], nil
}

// buildTool returns the path of the labtool binary for the current source,
// building it into cacheDir when it is not there yet.
func buildTool(ctx context.Context, cacheDir string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	key, err := toolSourceHash(root)
	if err != nil {
		return "", fmt.Errorf("hash labtool source: %w", err)
	}
	if cacheDir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("find a cache dir for labtool: %w", err)
		}
		cacheDir = filepath.Join(base, "mcp-patch", "labtool")
	}
	out := filepath.Join(cacheDir, "labtool-"+key)
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("create labtool cache: %w", err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	tmp, err := os.CreateTemp(cacheDir, ".labtool-build-*")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.CommandContext(ctx, goBin, "build", "-trimpath", "-o", tmp.Name(), "./lab/fleet/labtool")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build labtool: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", fmt.Errorf("install labtool: %w", err)
	}
	return out, nil
}

// safeTools are the real programs a lab host may run besides its emulated
// commands: text and file tools that only touch what they are told to.
// Anything that changes the machine (reboot, apt, systemctl, mount, ip,
// sysctl, modprobe, grub-*) is either emulated or absent.
var safeTools = []string{
	"sh", "dash", "bash", "awk", "mawk", "gawk", "sed", "grep", "egrep", "fgrep", "cat", "tac", "head", "tail", "cut", "tr",
	"sort", "uniq", "wc", "paste", "join", "comm", "fold", "nl", "od", "xxd", "hexdump", "expr", "seq", "printf", "echo",
	"test", "[", "true", "false", "env", "printenv", "basename", "dirname", "readlink", "realpath", "pwd", "mktemp", "mkdir",
	"rmdir", "rm", "cp", "mv", "ln", "touch", "chmod", "ls", "stat", "find", "xargs", "tee", "date", "sleep", "timeout",
	"setsid", "nohup", "flock", "id", "whoami", "groups", "tar", "gzip", "gunzip", "zcat", "sha256sum", "sha1sum",
	"md5sum", "base64", "cmp", "diff", "kill", "ps", "pgrep", "nproc", "getconf", "sync", "du", "jq", "column", "iconv",
}

// makeSafeBin links the safe tools found on this machine into dir.
func makeSafeBin(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	search := []string{"/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"}
	for _, t := range safeTools {
		for _, d := range search {
			p := filepath.Join(d, t)
			if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
				if err := os.Symlink(p, filepath.Join(dir, t)); err != nil && !errors.Is(err, fs.ErrExist) {
					return err
				}
				break
			}
		}
	}
	return nil
}
