package cluster

import (
	"log/slog"
	"testing"
)

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
