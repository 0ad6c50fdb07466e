package gate

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"
)

// OIDCConfig says where the API server's OIDC settings come from and how
// to reach the issuer.
type OIDCConfig struct {
	// Disabled records that the cluster has no OIDC authenticator; the check
	// passes saying so without looking.
	Disabled bool
	// Manifests are kube-apiserver static pod manifests read from the
	// control-plane hosts, by a name for the evidence (e.g.
	// "cp-1:/etc/kubernetes/manifests/kube-apiserver.yaml"). They are read
	// in addition to the kube-apiserver pods the API lists.
	Manifests map[string][]byte
	// Files are host files named by API server flags, by path: the
	// --authentication-config file, the --oidc-ca-file.
	Files map[string][]byte
	// PodNamespace and PodSelector find the API server's mirror pods.
	// Empty: kube-system and component=kube-apiserver (kubeadm's labels).
	PodNamespace string
	PodSelector  string
	// CAPEM is added to the system roots for every issuer.
	CAPEM []byte
	// HTTPClient fetches discovery documents. Nil: a client with Timeout,
	// the system roots plus CAPEM plus each issuer's own CA.
	HTTPClient *http.Client
	// Timeout bounds each discovery fetch. Zero: 10s.
	Timeout time.Duration
}

// Issuer is one OIDC issuer the API server trusts.
type Issuer struct {
	URL string `json:"url"`
	// DiscoveryURL is where the discovery document is fetched:
	// AuthenticationConfiguration's discoveryURL, else
	// <url>/.well-known/openid-configuration.
	DiscoveryURL string `json:"discovery_url"`
	// CAPEM is the issuer's own CA (certificateAuthority, or the
	// --oidc-ca-file contents when given in Files).
	CAPEM   []byte   `json:"-"`
	Sources []string `json:"sources"`
}

// authenticationConfiguration is the part of apiserver.config.k8s.io
// AuthenticationConfiguration (v1, v1beta1, v1alpha1) read here.
type authenticationConfiguration struct {
	Kind string `json:"kind"`
	JWT  []struct {
		Issuer struct {
			URL                  string `json:"url"`
			DiscoveryURL         string `json:"discoveryURL"`
			CertificateAuthority string `json:"certificateAuthority"`
		} `json:"issuer"`
	} `json:"jwt"`
}

// FindIssuers reads the OIDC issuers from the API server's flags
// (--oidc-issuer-url) and its AuthenticationConfiguration file
// (jwt[].issuer.url). sources names every place read; problems are settings
// that could not be followed (a config file not provided, say).
func FindIssuers(ctx context.Context, kc kubernetes.Interface, cfg OIDCConfig) (issuers []Issuer, sources, problems []string, err error) {
	type podSource struct {
		name string
		pod  corev1.Pod
	}
	var pods []podSource
	ns := cfg.PodNamespace
	if ns == "" {
		ns = metav1.NamespaceSystem
	}
	sel := cfg.PodSelector
	if sel == "" {
		sel = "component=kube-apiserver"
	}
	if kc != nil {
		l, err := kc.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, nil, nil, fmt.Errorf("list kube-apiserver pods (%s, %s): %w", ns, sel, err)
		}
		for _, p := range l.Items {
			pods = append(pods, podSource{name: "pod " + p.Namespace + "/" + p.Name, pod: p})
		}
	}
	names := make([]string, 0, len(cfg.Manifests))
	for n := range cfg.Manifests {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		var p corev1.Pod
		if err := yaml.Unmarshal(cfg.Manifests[n], &p); err != nil {
			problems = append(problems, fmt.Sprintf("manifest %s: not a pod manifest: %v", n, err))
			continue
		}
		pods = append(pods, podSource{name: "manifest " + n, pod: p})
	}

	byKey := map[string]*Issuer{}
	var order []string
	addIssuer := func(url, discovery string, ca []byte, source string) {
		if discovery == "" {
			discovery = strings.TrimSuffix(url, "/") + "/.well-known/openid-configuration"
		}
		key := url + "\x00" + discovery
		is := byKey[key]
		if is == nil {
			is = &Issuer{URL: url, DiscoveryURL: discovery, CAPEM: ca}
			byKey[key] = is
			order = append(order, key)
		}
		is.Sources = append(is.Sources, source)
	}
	for _, ps := range pods {
		flags, found := apiserverFlags(&ps.pod)
		if !found {
			problems = append(problems, ps.name+": no kube-apiserver container")
			continue
		}
		sources = append(sources, ps.name)
		if url := flags["--oidc-issuer-url"]; url != "" {
			var ca []byte
			if f := flags["--oidc-ca-file"]; f != "" {
				ca = cfg.Files[f] // absent: the system roots and CAPEM must do
			}
			addIssuer(url, "", ca, ps.name+" --oidc-issuer-url")
		}
		if path := flags["--authentication-config"]; path != "" {
			data, ok := cfg.Files[path]
			if !ok {
				problems = append(problems, fmt.Sprintf("%s uses --authentication-config=%s, but that file was not provided", ps.name, path))
				continue
			}
			var ac authenticationConfiguration
			if err := yaml.Unmarshal(data, &ac); err != nil || ac.Kind != "AuthenticationConfiguration" {
				problems = append(problems, fmt.Sprintf("%s: %s is not an AuthenticationConfiguration (%v)", ps.name, path, err))
				continue
			}
			for i, j := range ac.JWT {
				if j.Issuer.URL == "" {
					problems = append(problems, fmt.Sprintf("%s: %s jwt[%d] has no issuer.url", ps.name, path, i))
					continue
				}
				var ca []byte
				if j.Issuer.CertificateAuthority != "" {
					ca = []byte(j.Issuer.CertificateAuthority)
				}
				addIssuer(j.Issuer.URL, j.Issuer.DiscoveryURL, ca, fmt.Sprintf("%s %s jwt[%d]", ps.name, path, i))
			}
		}
	}
	for _, k := range order {
		issuers = append(issuers, *byKey[k])
	}
	return issuers, sources, problems, nil
}

// apiserverFlags returns the --flag=value pairs of the kube-apiserver
// container (its command and args; "--flag value" is read too).
func apiserverFlags(p *corev1.Pod) (map[string]string, bool) {
	for _, c := range p.Spec.Containers {
		argv := append(append([]string(nil), c.Command...), c.Args...)
		if !strings.Contains(c.Name, "kube-apiserver") && !containsBase(argv, "kube-apiserver") {
			continue
		}
		flags := map[string]string{}
		for i := 0; i < len(argv); i++ {
			a := argv[i]
			if !strings.HasPrefix(a, "--") {
				continue
			}
			if k, v, ok := strings.Cut(a, "="); ok {
				flags[k] = v
			} else if i+1 < len(argv) && !strings.HasPrefix(argv[i+1], "--") {
				flags[a] = argv[i+1]
				i++
			} else {
				flags[a] = "true"
			}
		}
		return flags, true
	}
	return nil, false
}

func containsBase(argv []string, name string) bool {
	for _, a := range argv {
		if a == name || strings.HasSuffix(a, "/"+name) {
			return true
		}
	}
	return false
}

// CheckOIDC finds every issuer the API server trusts and requires each one's
// discovery document to answer within the bound with an "issuer" equal to
// the configured URL, byte for byte.
func CheckOIDC(ctx context.Context, kc kubernetes.Interface, cfg OIDCConfig) Check {
	return timed(func() Check {
		c := Check{Name: NameOIDC}
		if cfg.Disabled {
			c.OK = true
			c.Evidence = append(c.Evidence, "OIDC check disabled by configuration: the cluster has no OIDC authenticator")
			return c
		}
		issuers, sources, problems, err := FindIssuers(ctx, kc, cfg)
		if err != nil {
			c.Reason = err.Error()
			return c
		}
		c.Evidence = append(c.Evidence, "read: "+listOr(sources, "nothing"))
		if len(sources) == 0 {
			c.Reason = "no kube-apiserver pod or manifest found to read the OIDC settings from"
			if len(problems) > 0 {
				c.Reason += ": " + strings.Join(problems, "; ")
			}
			return c
		}
		if len(issuers) == 0 && len(problems) == 0 {
			c.OK = true
			c.Evidence = append(c.Evidence, "no OIDC issuer configured (no --oidc-issuer-url, no jwt authenticator)")
			return c
		}
		bad := append([]string(nil), problems...)
		for _, is := range issuers {
			line, problem := probeIssuer(ctx, is, cfg)
			c.Evidence = append(c.Evidence, line)
			if problem != "" {
				bad = append(bad, problem)
			}
		}
		if len(bad) > 0 {
			c.Reason = strings.Join(bad, "; ")
			return c
		}
		c.OK = true
		return c
	})
}

func probeIssuer(ctx context.Context, is Issuer, cfg OIDCConfig) (evidence, problem string) {
	timeout := orDuration(cfg.Timeout, 10*time.Second)
	hc := cfg.HTTPClient
	if hc == nil {
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		pool.AppendCertsFromPEM(cfg.CAPEM)
		pool.AppendCertsFromPEM(is.CAPEM)
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		hc = &http.Client{Transport: tr, Timeout: timeout}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	fail := func(format string, a ...any) (string, string) {
		msg := fmt.Sprintf("issuer %s: ", is.URL) + fmt.Sprintf(format, a...)
		return msg + " (configured in " + strings.Join(is.Sources, ", ") + ")", msg
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, is.DiscoveryURL, nil)
	if err != nil {
		return fail("bad discovery URL %q: %v", is.DiscoveryURL, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return fail("fetch %s: %v", is.DiscoveryURL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fail("read %s: %v", is.DiscoveryURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fail("fetch %s: HTTP %d", is.DiscoveryURL, resp.StatusCode)
	}
	var doc struct {
		Issuer  string `json:"issuer"`
		JWKSURI string `json:"jwks_uri"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return fail("%s is not a discovery document: %v", is.DiscoveryURL, err)
	}
	if doc.Issuer != is.URL {
		return fail("discovery at %s names issuer %q, want exactly %q", is.DiscoveryURL, doc.Issuer, is.URL)
	}
	if doc.JWKSURI == "" {
		return fail("discovery at %s has no jwks_uri", is.DiscoveryURL)
	}
	return fmt.Sprintf("issuer %s: discovery %s answered in %v, issuer matches, jwks_uri %s (configured in %s)",
		is.URL, is.DiscoveryURL, time.Since(start).Round(time.Millisecond), doc.JWKSURI, strings.Join(is.Sources, ", ")), ""
}

func listOr(s []string, none string) string {
	if len(s) == 0 {
		return none
	}
	return strings.Join(s, ", ")
}
