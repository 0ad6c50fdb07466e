package usednonces_test

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"k8s.io/client-go/kubernetes"

	"github.com/mcp-patch/mcp-patch/internal/testsupport/labkube"
	"github.com/mcp-patch/mcp-patch/kube"
	"github.com/mcp-patch/mcp-patch/kube/usednonces"
	"github.com/mcp-patch/mcp-patch/policy"
)

// Two mcp-patch servers, each with its own state directory, verify
// approvals against one real API server: the ConfigMap every server looks
// at makes an approval single use across them.

func TestMain(m *testing.M) { labkube.Main(m) }

type server struct {
	v     *policy.Verifier
	files *policy.FileNonceStore
}

func newServer(t *testing.T, kc kubernetes.Interface, ns string, signers *policy.AllowedSigners) server {
	t.Helper()
	files, err := policy.OpenNonceStore(t.TempDir()) // a state directory of its own
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { files.Close() })
	shared := &usednonces.Store{Clients: func(context.Context) (*kube.Clients, error) { return &kube.Clients{Kube: kc}, nil }, Namespace: ns}
	return server{v: &policy.Verifier{AllowedSigners: signers, NonceStore: policy.Nonces(shared, files)}, files: files}
}

func approval(t *testing.T, signer ssh.Signer) (string, policy.Expectation) {
	t.Helper()
	digest := "sha256:" + strings.Repeat("ab", 32)
	req, err := policy.NewRequest("drain_node", "gpu-03", "2026-11", digest, []string{"drain gpu-03"}, 30*time.Minute, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := policy.Sign(signer, req.Canonical())
	if err != nil {
		t.Fatal(err)
	}
	return policy.FormatApproval(req, res.Signature),
		policy.Expectation{Tool: "drain_node", Node: "gpu-03", Round: "2026-11", PlanDigest: digest, Summary: req.Summary}
}

func TestReplayOnSecondServerRefused(t *testing.T) {
	c := labkube.Cluster(t)
	kc := c.Client()
	ns := labkube.Namespace(t, c)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	signer, _ := ssh.NewSignerFromKey(priv)
	signers, err := policy.ParseAllowedSigners([]byte("alice@example.org " + string(ssh.MarshalAuthorizedKey(signer.PublicKey()))))
	if err != nil {
		t.Fatal(err)
	}
	a, b := newServer(t, kc, ns, signers), newServer(t, kc, ns, signers)

	text, want := approval(t, signer)
	got, err := a.v.Verify(t.Context(), text, want)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.v.Consume(t.Context(), got); err != nil {
		t.Fatal(err)
	}
	_, err = b.v.Verify(t.Context(), text, want)
	if !errors.Is(err, policy.ErrReplayed) {
		t.Fatalf("second server, another state dir: Verify = %v, want replayed", err)
	}
	t.Logf("second server refused: %v", err)
	if b.files.Len() != 0 {
		t.Errorf("the second server's state dir has %d nonces; it learnt of the use from the cluster only", b.files.Len())
	}

	// Many calls on both servers, one approval, all verified before any
	// consumed: the API server lets exactly one through.
	text, want = approval(t, signer)
	const callers = 16
	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		won, lost int
		other     []error
	)
	start := make(chan struct{})
	for i := range callers {
		srv := a
		if i%2 == 1 {
			srv = b
		}
		got, err := srv.v.Verify(t.Context(), text, want)
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			err := srv.v.Consume(context.Background(), got)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				won++
			case errors.Is(err, policy.ErrReplayed):
				lost++
			default:
				other = append(other, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if won != 1 || lost != callers-1 || len(other) > 0 {
		t.Fatalf("%d consumed, %d refused as replayed, other errors %v; want exactly one consumed", won, lost, other)
	}
	t.Logf("%d concurrent consumes on two servers: 1 ran, %d refused as replayed", callers, lost)
}
