package driverimage_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/mcp-patch/mcp-patch/kube/driverimage"
)

// Paging and the token challenge as the distribution spec words them
// (Link: </v2/<name>/tags/list?n=N&last=T>; rel="next"; WWW-Authenticate:
// Bearer realm=…,service=…,scope=…), which the registry Debian ships does
// not do: nvcr.io and other large registries answer this way.
func TestPagedListBehindAToken(t *testing.T) {
	tags := []string{"535-6.8.0-40-generic-ubuntu22.04", "535-6.8.0-45-generic-ubuntu22.04", "550-6.8.0-45-generic-ubuntu22.04", "550.127.08-ubuntu22.04"}
	var tokenAsks, pages int
	mux := http.NewServeMux()
	var srv *httptest.Server
	mux.HandleFunc("/token", func(w http.ResponseWriter, r *http.Request) {
		tokenAsks++
		if r.URL.Query().Get("scope") != "repository:nvidia/driver:pull" || r.URL.Query().Get("service") != "registry.test" {
			http.Error(w, "bad scope "+r.URL.RawQuery, http.StatusBadRequest)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"token": "tok-1"})
	})
	mux.HandleFunc("/v2/nvidia/driver/tags/list", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok-1" {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token",service="registry.test",scope="repository:nvidia/driver:pull"`, srv.URL))
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		pages++
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		start := 0
		if last := r.URL.Query().Get("last"); last != "" {
			for i, tg := range tags {
				if tg == last {
					start = i + 1
				}
			}
		}
		end := min(start+n, len(tags))
		if end < len(tags) {
			w.Header().Set("Link", fmt.Sprintf(`</v2/nvidia/driver/tags/list?n=%d&last=%s>; rel="next"`, n, tags[end-1]))
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"name": "nvidia/driver", "tags": tags[start:end]})
	})
	srv = httptest.NewServer(mux)
	defer srv.Close()
	im := driverimage.Image{Registry: srv.URL, Repository: "nvidia/driver"}

	r := driverimage.Checker{PageSize: 2}.Check(t.Context(), im, "550-6.8.0-45-generic-ubuntu22.04")
	if r.Verdict != driverimage.Present || r.Tags != 4 || pages != 2 || tokenAsks != 1 {
		t.Fatalf("%+v after %d pages and %d token asks, want present among 4 tags, 2 pages, 1 token", r, pages, tokenAsks)
	}
	r = driverimage.Checker{PageSize: 1, MaxPages: 3}.Check(t.Context(), im, "550-6.8.0-45-generic-ubuntu22.04")
	if r.Verdict != driverimage.Uncertain || !strings.Contains(r.Reason, "more than 3 pages") {
		t.Fatalf("%+v, want could not check past the page bound", r)
	}
}

func TestTag(t *testing.T) {
	// NVIDIA's rule and its own example (precompiled-drivers.rst).
	if got := driverimage.Tag("525", "5.15.0-69-generic", "ubuntu22.04"); got != "525-5.15.0-69-generic-ubuntu22.04" {
		t.Fatalf("tag %q", got)
	}
}
