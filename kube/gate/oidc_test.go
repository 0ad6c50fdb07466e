package gate

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const fixtures = "../../testdata/fixtures/k8s/"

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatalf("read fixture: %v", err)
	}
	return data
}

const (
	manifestWithOIDC   = "kube-apiserver-static-pod_kubeadm-v1.15-WITH-oidc-keycloak.yaml"
	manifestBeforeOIDC = "kube-apiserver-static-pod_kubeadm-v1.15-same-cluster-before-oidc.yaml"
	manifestHANoOIDC   = "kube-apiserver-static-pod_kubeadm-v1.27-ha-vip-no-oidc.yaml"
	fixtureIssuer      = "https://zwerk.org/auth/realms/k8s"
)

// testCA issues server certificates for the hosts it is asked for.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t testing.TB) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "oidc test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

func (ca *testCA) serverCert(t testing.TB, dnsNames []string, ips []net.IP) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "issuer"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: dnsNames, IPAddresses: ips,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// issuerServer serves a discovery document at path, naming issuer, over
// TLS with cert. delay holds each answer back.
func issuerServer(t testing.TB, cert tls.Certificate, path, issuer string, delay time.Duration) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"issuer": issuer, "jwks_uri": issuer + "/protocol/openid-connect/certs",
			"id_token_signing_alg_values_supported": []string{"RS256"},
		})
	})
	srv := httptest.NewUnstartedServer(mux)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the untrusted-certificate case fails handshakes on purpose
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// pinnedClient trusts ca and sends every connection to addr, the way a
// resolver would for the issuer's real host name.
func pinnedClient(ca *testCA, addr string) *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.pem)
	tr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		},
	}
	return &http.Client{Transport: tr, Timeout: 5 * time.Second}
}

// withAuthConfigFlag adds --authentication-config to a manifest fixture.
func withAuthConfigFlag(t testing.TB, manifest []byte, path string) []byte {
	t.Helper()
	s := string(manifest)
	const anchor = "    - --authorization-mode=Node,RBAC\n"
	if !strings.Contains(s, anchor) {
		t.Fatal("fixture changed: no authorization-mode flag")
	}
	return []byte(strings.Replace(s, anchor, anchor+"    - --authentication-config="+path+"\n", 1))
}

func TestCheckOIDC(t *testing.T) {
	ca := newTestCA(t)
	zwerk := ca.serverCert(t, []string{"zwerk.org"}, nil)
	loop := ca.serverCert(t, nil, []net.IP{net.ParseIP("127.0.0.1")})
	discovery := "/auth/realms/k8s/.well-known/openid-configuration"

	good := issuerServer(t, zwerk, discovery, fixtureIssuer, 0)
	slash := issuerServer(t, zwerk, discovery, fixtureIssuer+"/", 0)
	slow := issuerServer(t, zwerk, discovery, fixtureIssuer, 3*time.Second)
	missing := issuerServer(t, zwerk, "/elsewhere", fixtureIssuer, 0)

	// An issuer on loopback whose CA comes only from the
	// AuthenticationConfiguration: the default client must use it.
	var loopURL string
	loopSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/realms/ops/.well-known/openid-configuration" {
			http.NotFound(w, r)
			return
		}
		json.NewEncoder(w).Encode(map[string]string{"issuer": loopURL, "jwks_uri": loopURL + "/keys"})
	}))
	loopSrv.TLS = &tls.Config{Certificates: []tls.Certificate{loop}}
	loopSrv.StartTLS()
	t.Cleanup(loopSrv.Close)
	loopURL = loopSrv.URL + "/realms/ops"
	authConfig := "apiVersion: apiserver.config.k8s.io/v1\nkind: AuthenticationConfiguration\njwt:\n- issuer:\n    url: " + loopURL +
		"\n    audiences: [kubernetes]\n    certificateAuthority: |\n" + indent(string(ca.pem), "      ") +
		"  claimMappings:\n    username:\n      claim: email\n      prefix: \"\"\n"

	authPath := "/etc/kubernetes/auth/authentication-config.yaml"
	tests := []struct {
		name       string
		cfg        OIDCConfig
		wantOK     bool
		wantReason string   // substring
		wantIn     []string // evidence substrings
	}{
		{
			name:   "issuer flag, discovery matches",
			cfg:    OIDCConfig{Manifests: map[string][]byte{"cp-1": readFixture(t, manifestWithOIDC)}, HTTPClient: pinnedClient(ca, good.Listener.Addr().String())},
			wantOK: true,
			wantIn: []string{"read: manifest cp-1", "issuer " + fixtureIssuer + ": discovery " + fixtureIssuer + "/.well-known/openid-configuration answered", "issuer matches"},
		},
		{
			name:       "discovery issuer differs by a trailing slash",
			cfg:        OIDCConfig{Manifests: map[string][]byte{"cp-1": readFixture(t, manifestWithOIDC)}, HTTPClient: pinnedClient(ca, slash.Listener.Addr().String())},
			wantReason: `names issuer "https://zwerk.org/auth/realms/k8s/", want exactly "https://zwerk.org/auth/realms/k8s"`,
		},
		{
			name:       "discovery document missing",
			cfg:        OIDCConfig{Manifests: map[string][]byte{"cp-1": readFixture(t, manifestWithOIDC)}, HTTPClient: pinnedClient(ca, missing.Listener.Addr().String())},
			wantReason: "HTTP 404",
		},
		{
			name: "issuer slower than the bound",
			cfg: OIDCConfig{Manifests: map[string][]byte{"cp-1": readFixture(t, manifestWithOIDC)}, Timeout: 300 * time.Millisecond,
				HTTPClient: pinnedClient(ca, slow.Listener.Addr().String())},
			wantReason: "context deadline exceeded",
		},
		{
			name:       "issuer's certificate not trusted",
			cfg:        OIDCConfig{Manifests: map[string][]byte{"cp-1": readFixture(t, manifestWithOIDC)}, HTTPClient: pinnedClient(newTestCA(t), good.Listener.Addr().String())},
			wantReason: "certificate signed by unknown authority",
		},
		{
			name:   "no OIDC before it was configured",
			cfg:    OIDCConfig{Manifests: map[string][]byte{"cp-1": readFixture(t, manifestBeforeOIDC), "cp-2": readFixture(t, manifestHANoOIDC)}},
			wantOK: true,
			wantIn: []string{"read: manifest cp-1, manifest cp-2", "no OIDC issuer configured"},
		},
		{
			name: "AuthenticationConfiguration with its own CA",
			cfg: OIDCConfig{
				Manifests: map[string][]byte{"cp-1": withAuthConfigFlag(t, readFixture(t, manifestBeforeOIDC), authPath)},
				Files:     map[string][]byte{authPath: []byte(authConfig)},
			},
			wantOK: true,
			wantIn: []string{"issuer " + loopURL + ": discovery " + loopURL + "/.well-known/openid-configuration answered", "jwt[0]"},
		},
		{
			name:       "AuthenticationConfiguration file not provided",
			cfg:        OIDCConfig{Manifests: map[string][]byte{"cp-1": withAuthConfigFlag(t, readFixture(t, manifestBeforeOIDC), authPath)}},
			wantReason: "uses --authentication-config=" + authPath + ", but that file was not provided",
		},
		{
			name:       "nothing to read from",
			cfg:        OIDCConfig{},
			wantReason: "no kube-apiserver pod or manifest found",
		},
		{
			name:   "disabled",
			cfg:    OIDCConfig{Disabled: true},
			wantOK: true,
			wantIn: []string{"disabled by configuration"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := CheckOIDC(t.Context(), nil, tt.cfg)
			t.Logf("check: %+v", c)
			if c.Name != NameOIDC || c.OK != tt.wantOK {
				t.Fatalf("check %s ok=%v, want ok=%v; reason %q", c.Name, c.OK, tt.wantOK, c.Reason)
			}
			if !strings.Contains(c.Reason, tt.wantReason) {
				t.Errorf("reason %q does not contain %q", c.Reason, tt.wantReason)
			}
			all := strings.Join(c.Evidence, "\n")
			for _, s := range tt.wantIn {
				if !strings.Contains(all, s) {
					t.Errorf("evidence lacks %q:\n%s", s, all)
				}
			}
		})
	}
}

func TestFindIssuersFromFixtures(t *testing.T) {
	issuers, sources, problems, err := FindIssuers(t.Context(), nil, OIDCConfig{Manifests: map[string][]byte{
		"cp-1": readFixture(t, manifestWithOIDC),
		"cp-2": readFixture(t, manifestWithOIDC),
		"cp-3": readFixture(t, manifestBeforeOIDC),
		"bad":  []byte("spec: [unclosed"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := []Issuer{{
		URL:          fixtureIssuer,
		DiscoveryURL: fixtureIssuer + "/.well-known/openid-configuration",
		Sources:      []string{"manifest cp-1 --oidc-issuer-url", "manifest cp-2 --oidc-issuer-url"},
	}}
	if d := cmp.Diff(want, issuers); d != "" {
		t.Errorf("issuers (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"manifest cp-1", "manifest cp-2", "manifest cp-3"}, sources); d != "" {
		t.Errorf("sources (-want +got):\n%s", d)
	}
	if len(problems) != 1 || !strings.HasPrefix(problems[0], "manifest bad: not a pod manifest") {
		t.Errorf("problems = %q", problems)
	}
}

func indent(s, prefix string) string {
	lines := strings.SplitAfter(s, "\n")
	var b strings.Builder
	for _, l := range lines {
		if l != "" {
			b.WriteString(prefix + l)
		}
	}
	return b.String()
}
