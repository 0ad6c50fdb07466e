package cluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Environment variables that steer FindBinaries.
const (
	// EnvBinDir names a directory that already holds every binary in
	// RequiredBinaries (and kwok's stages in ../stages); no build is run.
	EnvBinDir = "MCP_PATCH_CONTROLPLANE_BIN"
)

// buildScript is the script, relative to the repository root, that builds
// the binaries into the cache and prints their directory on its last line.
// The binary carries it and the pins it builds from (writeBuildTree), so
// neither the source tree nor the working directory matters.
const buildScript = "scripts/build-controlplane.sh"

// buildTimeout bounds a build from nothing on a slow, shared machine.
const buildTimeout = 40 * time.Minute

// RequiredBinaries are the executables a Binaries directory must hold. The
// build script makes them links to two multi-call binaries (etcd and
// kube-controlplane) that pick the program by the name they are run under.
// kubectl is not among them: only tests run it (Cluster.Kubectl), and it is
// built into the same directory when first asked for (Kubectl).
var RequiredBinaries = []string{"etcd", "etcdctl", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}

// Binaries is a directory of control-plane executables built by
// scripts/build-controlplane.sh.
type Binaries struct {
	// Dir holds the executables named in RequiredBinaries.
	Dir string
}

// Path returns the path of the named executable.
func (b Binaries) Path(name string) string { return filepath.Join(b.Dir, name) }

// StagesDir holds kwok's stage files, beside the bin directory.
func (b Binaries) StagesDir() string { return filepath.Join(filepath.Dir(b.Dir), "stages") }

// check reports the first missing executable or an empty stages directory.
func (b Binaries) check() error {
	for _, name := range RequiredBinaries {
		info, err := os.Stat(b.Path(name))
		if err != nil {
			return fmt.Errorf("control-plane binaries in %s: %w", b.Dir, err)
		}
		if info.Mode()&0o111 == 0 {
			return fmt.Errorf("control-plane binaries in %s: %s is not executable", b.Dir, name)
		}
	}
	stages, err := filepath.Glob(filepath.Join(b.StagesDir(), "*.yaml"))
	if err != nil || len(stages) == 0 {
		return fmt.Errorf("control-plane binaries in %s: no kwok stage files in %s", b.Dir, b.StagesDir())
	}
	return nil
}

var (
	foundMu sync.Mutex
	found   *Binaries
)

// FindBinaries returns the control-plane binaries, building them when they
// are not in the cache yet (minutes on first use; the build script holds a
// lock so parallel callers wait for one build). $MCP_PATCH_CONTROLPLANE_BIN
// short-circuits the search. The build's progress lines go to logger.
func FindBinaries(ctx context.Context, logger *slog.Logger) (Binaries, error) {
	foundMu.Lock()
	defer foundMu.Unlock()
	if found != nil {
		return *found, nil
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	var bins Binaries
	if dir := os.Getenv(EnvBinDir); dir != "" {
		bins = Binaries{Dir: dir}
	} else {
		dir, err := runEmbeddedBuild(ctx, logger, buildSet)
		if err != nil {
			return Binaries{}, err
		}
		bins = Binaries{Dir: dir}
	}
	if err := bins.check(); err != nil {
		return Binaries{}, err
	}
	found = &bins
	return bins, nil
}

// ErrNotBuilt is returned by CachedBinaries when the binaries for the current
// pins are not in the cache yet.
var ErrNotBuilt = errors.New("control-plane binaries are not built yet: the first mcp-patch lab up (or demo) builds them, or run sh scripts/build-controlplane.sh once in a clone (minutes; it prints its progress)")

// CachedBinaries is FindBinaries without the build: it returns ErrNotBuilt
// when the cache lacks the binaries for the current pins.
func CachedBinaries(ctx context.Context) (Binaries, error) {
	foundMu.Lock()
	defer foundMu.Unlock()
	if found != nil {
		return *found, nil
	}
	bins := Binaries{Dir: os.Getenv(EnvBinDir)}
	if bins.Dir == "" {
		dir, err := runEmbeddedBuild(ctx, slog.New(slog.DiscardHandler), buildCachedOnly)
		if err != nil {
			return Binaries{}, err
		}
		bins.Dir = dir
	}
	if err := bins.check(); err != nil {
		return Binaries{}, err
	}
	found = &bins
	return bins, nil
}

// notBuiltExit is the build script's exit status for --cached-only when
// nothing is cached.
const notBuiltExit = 3

// buildMode is what the build script is asked for: its argument.
type buildMode string

const (
	buildSet        buildMode = ""              // the set, built when not cached
	buildCachedOnly buildMode = "--cached-only" // the set when cached, else ErrNotBuilt
	buildKubectl    buildMode = "--kubectl"     // the set with kubectl in it
)

var kubectlMu sync.Mutex

// Kubectl returns the path of kubectl beside the control plane in b,
// building it into b's directory the first time (a minute or so when the
// control plane was built on this machine: most of its packages are in the
// Go build cache; the build script's lock makes parallel callers wait for
// one build). With $MCP_PATCH_CONTROLPLANE_BIN the directory must hold it
// already. The build's progress lines go to logger.
func Kubectl(ctx context.Context, logger *slog.Logger, b Binaries) (string, error) {
	kubectlMu.Lock()
	defer kubectlMu.Unlock()
	p := b.Path("kubectl")
	if info, err := os.Stat(p); err == nil && info.Mode()&0o111 != 0 {
		return p, nil
	}
	if os.Getenv(EnvBinDir) != "" {
		return "", fmt.Errorf("kubectl: not in %s ($%s): build it with sh scripts/build-controlplane.sh --kubectl and point $%s at that set", b.Dir, EnvBinDir, EnvBinDir)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	dir, err := runEmbeddedBuild(ctx, logger, buildKubectl)
	if err != nil {
		return "", fmt.Errorf("kubectl: %w", err)
	}
	if dir != b.Dir {
		return "", fmt.Errorf("kubectl: the build script built into %s, not the control plane's %s (the pins changed since it started?)", dir, b.Dir)
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("kubectl: the build script left none in %s: %w", b.Dir, err)
	}
	return p, nil
}

// runEmbeddedBuild runs the build script this binary carries on the pins
// it carries, from a temporary copy that it removes afterwards.
func runEmbeddedBuild(ctx context.Context, logger *slog.Logger, mode buildMode) (dir string, err error) {
	root, err := writeBuildTree()
	if err != nil {
		return "", err
	}
	defer func() {
		if rmErr := os.RemoveAll(root); rmErr != nil && err == nil {
			err = fmt.Errorf("build control plane: remove %s: %w", root, rmErr)
		}
	}()
	return runBuildScript(ctx, logger, root, mode)
}

// runBuildScript runs the build script and returns the bin directory it
// prints last. Its stderr lines are logged as they come. With
// buildCachedOnly the script builds nothing and a missing build is
// ErrNotBuilt.
func runBuildScript(ctx context.Context, logger *slog.Logger, root string, mode buildMode) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, buildTimeout)
	defer cancel()
	args := []string{filepath.Join(root, buildScript)}
	if mode != buildSet {
		args = append(args, string(mode))
	}
	cmd := exec.CommandContext(ctx, "sh", args...)
	cmd.Dir = root
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", fmt.Errorf("build control plane: %w", err)
	}
	// Killing the script's whole group on cancel also ends the go build under it.
	cmd.SysProcAttr = childAttributes()
	cmd.Cancel = func() error { return killGroup(cmd.Process.Pid) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("build control plane: %w", err)
	}
	var lastLines []string
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		logger.Info("build control plane", "progress", line)
		lastLines = append(lastLines, line)
		if len(lastLines) > 30 {
			lastLines = lastLines[1:]
		}
	}
	_, _ = io.Copy(io.Discard, stderr)
	if err := cmd.Wait(); err != nil {
		var exit *exec.ExitError
		if mode == buildCachedOnly && errors.As(err, &exit) && exit.ExitCode() == notBuiltExit {
			return "", ErrNotBuilt
		}
		return "", fmt.Errorf("build control plane with %s: %w\n%s", buildScript, err, strings.Join(lastLines, "\n"))
	}
	out := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	dir := strings.TrimSpace(out[len(out)-1])
	if dir == "" {
		return "", errors.New("build control plane: the script printed no bin directory")
	}
	return dir, nil
}
