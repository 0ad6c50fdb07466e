package cluster

import (
	"errors"
	"log/slog"
	"testing"
	"time"
)

// buildAllowance is the test time left below which a test refuses to start
// a control-plane build (15-20 minutes on 2 cores) and says how to get one.
const buildAllowance = 30 * time.Minute

// binDirForTest returns the binaries directory for a test. When they are not
// built and the test's deadline (go test -timeout, 10m by default) leaves too
// little time to build them, the test fails at once with instructions rather
// than running into the deadline half-way through the build.
func binDirForTest(t testing.TB, logger *slog.Logger) string {
	t.Helper()
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, has := d.Deadline(); has && time.Until(deadline) < buildAllowance {
			bins, err := CachedBinaries(t.Context())
			if errors.Is(err, ErrNotBuilt) {
				t.Fatalf("%v, or give the test at least -timeout %v to build them itself", err, buildAllowance+10*time.Minute)
			}
			if err != nil {
				t.Fatal(err)
			}
			return bins.Dir
		}
	}
	bins, err := FindBinaries(t.Context(), logger)
	if err != nil {
		t.Fatal(err)
	}
	return bins.Dir
}

// StartT starts a cluster for a test or benchmark and stops it in
// t.Cleanup. Component logs go to a directory under t.TempDir; when the test
// has failed, their last lines are written to the test log first. A start
// failure ends the test.
func StartT(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	if opts.LogDir == "" {
		opts.LogDir = t.TempDir()
	}
	if opts.BinDir == "" {
		opts.BinDir = binDirForTest(t, opts.Logger)
	}
	c, err := Start(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("lab cluster logs (last lines):\n%s", c.LogTails(30))
		}
		if err := c.Stop(); err != nil {
			t.Error(err)
		}
	})
	return c
}

// StartEtcdClusterT starts an etcd cluster for a test and stops it in
// t.Cleanup; a start failure ends the test.
func StartEtcdClusterT(t testing.TB, opts EtcdOptions) *EtcdCluster {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	if opts.LogDir == "" {
		opts.LogDir = t.TempDir()
	}
	if opts.BinDir == "" {
		opts.BinDir = binDirForTest(t, opts.Logger)
	}
	e, err := StartEtcdCluster(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("lab etcd logs (last lines):\n%s", e.LogTails(30))
		}
		if err := e.Stop(); err != nil {
			t.Error(err)
		}
	})
	return e
}

// testWriter sends log lines to the test log.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p))
	return len(p), nil
}
