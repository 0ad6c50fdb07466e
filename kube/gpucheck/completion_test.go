package gpucheck

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// modelServer answers like an OpenAI-compatible server (vLLM, TGI, NIM):
// routes lists the paths it serves; answer is the text it returns.
func modelServer(t *testing.T, routes []string, answer string, delay time.Duration) (*httptest.Server, *[]map[string]any) {
	t.Helper()
	var seen []map[string]any
	mux := http.NewServeMux()
	for _, r := range routes {
		mux.HandleFunc("POST "+r, func(w http.ResponseWriter, req *http.Request) {
			var body map[string]any
			if err := json.NewDecoder(req.Body).Decode(&body); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body["_path"] = req.URL.Path
			body["_auth"] = req.Header.Get("Authorization")
			seen = append(seen, body)
			select {
			case <-time.After(delay):
			case <-req.Context().Done():
				return
			}
			if body["model"] != "llama-3-8b" {
				w.WriteHeader(http.StatusNotFound)
				json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"message": "The model does not exist."}})
				return
			}
			choice := map[string]any{"index": 0, "finish_reason": "length"}
			if strings.HasSuffix(req.URL.Path, "/chat/completions") {
				choice["message"] = map[string]string{"role": "assistant", "content": answer}
			} else {
				choice["text"] = answer
			}
			json.NewEncoder(w).Encode(map[string]any{"id": "cmpl-1", "object": "text_completion", "model": "llama-3-8b", "choices": []any{choice}})
		})
	}
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, &seen
}

func TestComplete(t *testing.T) {
	long := strings.Repeat("é", 250)
	tests := []struct {
		name       string
		routes     []string
		answer     string
		delay      time.Duration
		req        CompletionRequest
		suffix     string // appended to the server URL
		wantOK     bool
		wantAPI    string
		wantAnswer string
		wantReason string
		wantPaths  []string
	}{
		{name: "completions", routes: []string{"/v1/completions"}, answer: " Paris.",
			wantOK: true, wantAPI: APICompletions, wantAnswer: " Paris.", wantPaths: []string{"/v1/completions"}},
		{name: "endpoint given with /v1/", routes: []string{"/v1/completions"}, answer: " Paris.", suffix: "/v1/",
			wantOK: true, wantAPI: APICompletions, wantAnswer: " Paris.", wantPaths: []string{"/v1/completions"}},
		{name: "chat only: falls back after 404", routes: []string{"/v1/chat/completions"}, answer: "Paris",
			wantOK: true, wantAPI: APIChat, wantAnswer: "Paris", wantPaths: []string{"/v1/chat/completions"}},
		{name: "chat asked for", routes: []string{"/v1/completions", "/v1/chat/completions"}, answer: "Paris", req: CompletionRequest{API: APIChat},
			wantOK: true, wantAPI: APIChat, wantAnswer: "Paris", wantPaths: []string{"/v1/chat/completions"}},
		{name: "empty answer", routes: []string{"/v1/completions"}, answer: "  ",
			wantAPI: APICompletions, wantReason: "empty answer", wantPaths: []string{"/v1/completions"}},
		{name: "long answer kept to its first 200 characters", routes: []string{"/v1/completions"}, answer: long,
			wantOK: true, wantAPI: APICompletions, wantAnswer: strings.Repeat("é", 200), wantPaths: []string{"/v1/completions"}},
		{name: "unknown model", routes: []string{"/v1/completions"}, answer: "x", req: CompletionRequest{Model: "gpt-9"},
			wantAPI: APIChat, wantReason: "The model does not exist.\"}}; then POST", wantPaths: []string{"/v1/completions"}},
		{name: "slower than the bound", routes: []string{"/v1/completions"}, answer: "x", delay: 2 * time.Second,
			req: CompletionRequest{Timeout: 200 * time.Millisecond}, wantAPI: APICompletions, wantReason: "no answer within the bound",
			wantPaths: []string{"/v1/completions"}},
		{name: "authorization header passed", routes: []string{"/v1/completions"}, answer: "ok",
			req:    CompletionRequest{Header: http.Header{"Authorization": {"Bearer s3cret"}}},
			wantOK: true, wantAPI: APICompletions, wantAnswer: "ok", wantPaths: []string{"/v1/completions"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, seen := modelServer(t, tt.routes, tt.answer, tt.delay)
			req := tt.req
			req.Endpoint = srv.URL + tt.suffix
			if req.Model == "" {
				req.Model = "llama-3-8b"
			}
			req.Prompt = "The capital of France is"
			res, err := Complete(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if res.OK != tt.wantOK || res.API != tt.wantAPI || res.Answer != tt.wantAnswer {
				t.Errorf("result ok=%v api=%q answer=%q; want ok=%v api=%q answer=%q (reason %q)",
					res.OK, res.API, res.Answer, tt.wantOK, tt.wantAPI, tt.wantAnswer, res.Reason)
			}
			if !strings.Contains(res.Reason, tt.wantReason) {
				t.Errorf("reason %q does not contain %q", res.Reason, tt.wantReason)
			}
			if res.OK && res.Latency <= 0 {
				t.Errorf("latency %v not measured", res.Latency)
			}
			var paths []string
			for _, b := range *seen {
				paths = append(paths, b["_path"].(string))
				if b["max_tokens"].(float64) != 16 {
					t.Errorf("max_tokens = %v, want the default 16", b["max_tokens"])
				}
				if tt.req.Header != nil && b["_auth"] != "Bearer s3cret" {
					t.Errorf("Authorization = %q", b["_auth"])
				}
			}
			if strings.Join(paths, ",") != strings.Join(tt.wantPaths, ",") {
				t.Errorf("server saw %v, want %v", paths, tt.wantPaths)
			}
		})
	}
}

func TestCompletionBadInput(t *testing.T) {
	tests := []struct {
		name string
		req  CompletionRequest
		want string
	}{
		{"no scheme", CompletionRequest{Endpoint: "model:8000", Model: "m", Prompt: "p"}, "not an http(s) URL"},
		{"no model", CompletionRequest{Endpoint: "http://model:8000", Prompt: "p"}, "model and prompt are required"},
		{"unknown API", CompletionRequest{Endpoint: "http://model:8000", Model: "m", Prompt: "p", API: "embeddings"}, `API "embeddings"`},
		{"negative timeout", CompletionRequest{Endpoint: "http://model:8000", Model: "m", Prompt: "p", Timeout: -time.Second}, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Complete(t.Context(), tt.req)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want %q", err, tt.want)
			}
		})
	}
}

func TestCompletionUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	res, err := Completion(t.Context(), url, "m", "p", time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.OK || !strings.Contains(res.Reason, "connection refused") {
		t.Errorf("result %+v, want a refused connection", res)
	}
}

func TestSplitModelURL(t *testing.T) {
	for _, c := range []struct{ in, base, api string }{
		{"http://m:8000/v1/chat/completions", "http://m:8000/v1", APIChat},
		{"http://m:8000/v1/chat/completions/", "http://m:8000/v1", APIChat},
		{"http://m:8000/v1/completions", "http://m:8000/v1", APICompletions},
		{"http://m:8000/v1/", "http://m:8000/v1", ""},
		{"http://m:8000", "http://m:8000", ""},
	} {
		if base, api := SplitModelURL(c.in); base != c.base || api != c.api {
			t.Errorf("SplitModelURL(%q) = %q, %q; want %q, %q", c.in, base, api, c.base, c.api)
		}
	}
}
