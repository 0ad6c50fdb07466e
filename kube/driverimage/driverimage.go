// Package driverimage answers, before the first cordon, whether the GPU
// Operator's precompiled driver image for a target kernel exists: the tag
// the operator asks for (<driver-branch>-<kernel>-<os-tag>, NVIDIA's
// precompiled-driver rule) looked up in the registry's own tag list (the
// OCI distribution API, GET /v2/<name>/tags/list, following its pages).
// Three answers: present, absent, or could not check (a registry that is
// down, refuses or answers nonsense) — never a pass without the tag seen.
package driverimage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Tag is the precompiled driver image's tag for a kernel: driver branch
// "535", kernel "5.15.0-69-generic", OS tag "ubuntu22.04" give
// "535-5.15.0-69-generic-ubuntu22.04".
func Tag(branch, kernel, osTag string) string {
	return branch + "-" + kernel + "-" + osTag
}

var tagRule = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// Image names a precompiled driver image repository, e.g. registry
// "nvcr.io", repository "nvidia/driver" (the ClusterPolicy's
// spec.driver.repository and image).
type Image struct {
	// Registry is host[:port], or a URL (http:// only for a registry on
	// loopback or one the configuration marks plain).
	Registry   string `json:"registry"`
	Repository string `json:"repository"`
	// Username and Password, when set, answer a Basic or token challenge.
	Username string `json:"-"`
	Password string `json:"-"`
}

// Ref is the image reference with a tag.
func (im Image) Ref(tag string) string {
	host := strings.TrimPrefix(strings.TrimPrefix(im.Registry, "https://"), "http://")
	return host + "/" + im.Repository + ":" + tag
}

// Verdict is the check's answer.
type Verdict string

// Verdicts.
const (
	Present   Verdict = "present"
	Absent    Verdict = "absent"
	Uncertain Verdict = "could_not_check"
)

// Result is one check.
type Result struct {
	Ref     string  `json:"ref"`
	Verdict Verdict `json:"verdict"`
	Reason  string  `json:"reason"`
	// Tags is how many tags the registry listed.
	Tags int `json:"tags"`
}

// Checker asks registries.
type Checker struct {
	HTTP *http.Client
	// MaxPages bounds the tag list's pages (default 100).
	MaxPages int
	// PageSize, when set, asks for pages of that many tags (?n=).
	PageSize int
}

// Check looks tag up in im's tag list.
func (c Checker) Check(ctx context.Context, im Image, tag string) Result {
	r := Result{Ref: im.Ref(tag), Verdict: Uncertain}
	if !tagRule.MatchString(tag) {
		r.Reason = fmt.Sprintf("tag %q is not a valid image tag", tag)
		return r
	}
	tags, err := c.Tags(ctx, im)
	if err != nil {
		var nf *notFound
		if errors.As(err, &nf) {
			r.Verdict, r.Reason = Absent, fmt.Sprintf("the registry has no repository %s, so no tag %s", im.Repository, tag)
			return r
		}
		r.Reason = "could not check the registry: " + err.Error()
		return r
	}
	r.Tags = len(tags)
	if slices.Contains(tags, tag) {
		r.Verdict, r.Reason = Present, fmt.Sprintf("the registry lists %s among %d tags of %s", tag, len(tags), im.Repository)
		return r
	}
	r.Verdict, r.Reason = Absent, fmt.Sprintf("the registry lists %d tags of %s, not %s", len(tags), im.Repository, tag)
	return r
}

type notFound struct{ what string }

func (e *notFound) Error() string { return e.what + ": not found" }

// Tags lists every tag of im's repository, page by page.
func (c Checker) Tags(ctx context.Context, im Image) ([]string, error) {
	base, err := baseURL(im.Registry)
	if err != nil {
		return nil, err
	}
	hc := c.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	pages := c.MaxPages
	if pages <= 0 {
		pages = 100
	}
	next := base.JoinPath("v2", im.Repository, "tags", "list")
	if c.PageSize > 0 {
		next.RawQuery = url.Values{"n": {fmt.Sprint(c.PageSize)}}.Encode()
	}
	var all []string
	auth := ""
	for range pages {
		body, link, a, err := get(ctx, hc, next, im, auth)
		if err != nil {
			return nil, err
		}
		auth = a
		var page struct {
			Name string   `json:"name"`
			Tags []string `json:"tags"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return nil, fmt.Errorf("tag list of %s: %w", im.Repository, err)
		}
		all = append(all, page.Tags...)
		if link == "" {
			return all, nil
		}
		u, err := next.Parse(link)
		if err != nil {
			return nil, fmt.Errorf("tag list's next page %q: %w", link, err)
		}
		next = u
	}
	return nil, fmt.Errorf("tag list of %s has more than %d pages", im.Repository, pages)
}

// baseURL is the registry's URL: https unless a URL says http.
func baseURL(reg string) (*url.URL, error) {
	if reg == "" {
		return nil, errors.New("no registry named")
	}
	if !strings.Contains(reg, "://") {
		reg = "https://" + reg
	}
	u, err := url.Parse(reg)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return nil, fmt.Errorf("registry %q: want host[:port] or an http(s) URL", reg)
	}
	return u, nil
}

var linkNext = regexp.MustCompile(`<([^>]+)>\s*;\s*rel="?next"?`)

// get reads one page, answering one authentication challenge (Basic, or a
// Bearer token from the realm the registry names) with im's credentials
// or anonymously; it returns the Authorization to reuse.
func get(ctx context.Context, hc *http.Client, u *url.URL, im Image, auth string) ([]byte, string, string, error) {
	for try := 0; try < 2; try++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return nil, "", "", err
		}
		req.Header.Set("Accept", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, "", "", err
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
		_ = resp.Body.Close() // the body was read whole; a close error changes nothing
		if err != nil {
			return nil, "", "", fmt.Errorf("read %s: %w", u.Redacted(), err)
		}
		switch {
		case resp.StatusCode == http.StatusOK:
			link := ""
			if m := linkNext.FindStringSubmatch(resp.Header.Get("Link")); m != nil {
				link = m[1]
			}
			return body, link, auth, nil
		case resp.StatusCode == http.StatusUnauthorized && try == 0:
			a, err := answer(ctx, hc, resp.Header.Get("WWW-Authenticate"), im)
			if err != nil {
				return nil, "", "", err
			}
			auth = a
			continue
		case resp.StatusCode == http.StatusNotFound:
			return nil, "", "", &notFound{what: "repository " + im.Repository}
		default:
			return nil, "", "", fmt.Errorf("GET %s: %s: %s", u.Redacted(), resp.Status, oneLine(body))
		}
	}
	return nil, "", "", fmt.Errorf("GET %s: still unauthorized with the credentials given", u.Redacted())
}

var param = regexp.MustCompile(`(\w+)="([^"]*)"`)

// answer builds the Authorization for a challenge.
func answer(ctx context.Context, hc *http.Client, challenge string, im Image) (string, error) {
	scheme, rest, _ := strings.Cut(strings.TrimSpace(challenge), " ")
	switch strings.ToLower(scheme) {
	case "basic":
		if im.Username == "" {
			return "", errors.New("the registry asks for a login (Basic) and none is configured")
		}
		req, _ := http.NewRequest(http.MethodGet, "http://x", nil)
		req.SetBasicAuth(im.Username, im.Password)
		return req.Header.Get("Authorization"), nil
	case "bearer":
		ps := map[string]string{}
		for _, m := range param.FindAllStringSubmatch(rest, -1) {
			ps[m[1]] = m[2]
		}
		realm, err := url.Parse(ps["realm"])
		if err != nil || ps["realm"] == "" || (realm.Scheme != "https" && realm.Scheme != "http") {
			return "", fmt.Errorf("the registry's token realm %q is not a URL", ps["realm"])
		}
		q := realm.Query()
		if ps["service"] != "" {
			q.Set("service", ps["service"])
		}
		scope := ps["scope"]
		if scope == "" {
			scope = "repository:" + im.Repository + ":pull"
		}
		q.Set("scope", scope)
		realm.RawQuery = q.Encode()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, realm.String(), nil)
		if err != nil {
			return "", err
		}
		if im.Username != "" {
			req.SetBasicAuth(im.Username, im.Password)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return "", fmt.Errorf("token from %s: %w", realm.Redacted(), err)
		}
		defer func() { _ = resp.Body.Close() }() // read-only request
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			return "", fmt.Errorf("token from %s: %w", realm.Redacted(), err)
		}
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("token from %s: %s", realm.Redacted(), resp.Status)
		}
		var tok struct {
			Token       string `json:"token"`
			AccessToken string `json:"access_token"`
		}
		if err := json.Unmarshal(body, &tok); err != nil {
			return "", fmt.Errorf("token from %s: %w", realm.Redacted(), err)
		}
		t := tok.Token
		if t == "" {
			t = tok.AccessToken
		}
		if t == "" {
			return "", fmt.Errorf("token from %s: no token in the answer", realm.Redacted())
		}
		return "Bearer " + t, nil
	}
	return "", fmt.Errorf("the registry asks for %q authentication, which is not supported", scheme)
}

func oneLine(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
