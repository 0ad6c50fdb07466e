// Package labkube gives the kube packages' tests one real control plane
// (lab/cluster: etcd, kube-apiserver, controller manager, scheduler, kwok)
// per test binary, started on first use and stopped by Main. Tests share it
// and keep apart by node and namespace names of their own.
//
// Only _test.go files import this package; production code must not.
package labkube

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mcp-patch/mcp-patch/lab/cluster"
)

var (
	once    sync.Once
	shared  *cluster.Cluster
	started error
)

// Main runs the tests and stops the shared cluster, if one was started.
func Main(m *testing.M) {
	code := m.Run()
	if shared != nil {
		if err := shared.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop lab cluster:", err)
			if code == 0 {
				code = 1
			}
		}
	}
	os.Exit(code)
}

// Cluster returns the shared cluster, starting it on first use. A start
// failure fails the test.
func Cluster(t testing.TB) *cluster.Cluster {
	t.Helper()
	once.Do(func() {
		level := slog.LevelWarn
		if testing.Verbose() {
			level = slog.LevelInfo
		}
		shared, started = cluster.Start(context.Background(), cluster.Options{
			Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
			ReadyTimeout: 4 * time.Minute,
		})
	})
	if started != nil {
		t.Fatalf("lab cluster: %v", started)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("lab cluster logs (last lines):\n%s", shared.LogTails(20))
		}
	})
	return shared
}

// Nodes creates kwok nodes and waits until each is Ready; they are deleted
// when the test ends.
func Nodes(t testing.TB, c *cluster.Cluster, nodes ...cluster.Node) {
	t.Helper()
	ctx := context.Background()
	for _, n := range nodes {
		if err := c.CreateNode(ctx, n); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = c.Client().CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{})
		})
	}
	for _, n := range nodes {
		if err := c.WaitNodeReady(ctx, n.Name); err != nil {
			t.Fatal(err)
		}
	}
}

// Namespace creates a namespace named after the test and deletes it when
// the test ends.
func Namespace(t testing.TB, c *cluster.Cluster) string {
	t.Helper()
	name := strings.ToLower(t.Name())
	name = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			return r
		}
		return '-'
	}, name)
	if len(name) > 50 {
		name = name[:50]
	}
	name = strings.Trim(name, "-") + fmt.Sprintf("-%d", time.Now().UnixNano()%100000)
	_, err := c.Client().CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client().CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// Eventually polls check every 100ms until it returns true or within
// passes; the last error is reported.
func Eventually(t testing.TB, within time.Duration, what string, check func(ctx context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	var last error
	for {
		ok, err := check(ctx)
		if ok {
			return
		}
		last = err
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %v (last error: %v)", what, within, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
