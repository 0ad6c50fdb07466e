package gpucheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

// The OpenAI-compatible APIs Completion can call.
const (
	APICompletions = "completions"      // POST /v1/completions
	APIChat        = "chat/completions" // POST /v1/chat/completions
)

// CompletionRequest is one completion asked of the model.
type CompletionRequest struct {
	// Endpoint is the server's base URL, with or without the /v1 suffix:
	// http://model.example:8000 or http://model.example:8000/v1.
	Endpoint string
	Model    string
	Prompt   string
	// MaxTokens bounds the answer. Zero: 16.
	MaxTokens int
	// API picks the route. Empty: completions, then chat/completions if
	// the server answers 404 or 405 to the first.
	API string
	// Timeout bounds the whole exchange (both routes). Zero: 60s.
	Timeout time.Duration
	// HTTPClient carries the requests. Nil: a plain client; the context
	// bounds it.
	HTTPClient *http.Client
	// Header is added to every request (Authorization, say).
	Header http.Header
}

// CompletionResult is what the model answered.
type CompletionResult struct {
	OK         bool          `json:"ok"`
	API        string        `json:"api,omitempty"`
	URL        string        `json:"url,omitempty"`
	HTTPStatus int           `json:"http_status,omitempty"`
	Latency    time.Duration `json:"latency_ns"`
	// Answer holds the first 200 characters of the answer.
	Answer string `json:"answer,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// AnswerPrefixLen is how many characters of the answer a result keeps.
const AnswerPrefixLen = 200

// Completion posts prompt to the model's OpenAI-compatible endpoint and
// requires a non-empty answer within timeout.
func Completion(ctx context.Context, endpointURL, model, prompt string, timeout time.Duration, hc *http.Client) (CompletionResult, error) {
	return Complete(ctx, CompletionRequest{Endpoint: endpointURL, Model: model, Prompt: prompt, Timeout: timeout, HTTPClient: hc})
}

// Complete is Completion with every option. An error is returned only for
// bad input; a model that does not answer is a result with OK false.
func Complete(ctx context.Context, req CompletionRequest) (CompletionResult, error) {
	base, err := url.Parse(strings.TrimSpace(req.Endpoint))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return CompletionResult{}, fmt.Errorf("model completion: endpoint %q is not an http(s) URL", req.Endpoint)
	}
	if req.Model == "" || req.Prompt == "" {
		return CompletionResult{}, errors.New("model completion: model and prompt are required")
	}
	if req.Timeout < 0 || req.MaxTokens < 0 {
		return CompletionResult{}, errors.New("model completion: negative timeout or max tokens")
	}
	routes := []string{APICompletions, APIChat}
	switch req.API {
	case "":
	case APICompletions, APIChat:
		routes = []string{req.API}
	default:
		return CompletionResult{}, fmt.Errorf("model completion: API %q: want %q or %q", req.API, APICompletions, APIChat)
	}
	hc := req.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	ctx, cancel := context.WithTimeout(ctx, orDuration(req.Timeout, 60*time.Second))
	defer cancel()

	var res CompletionResult
	var earlier []string
	for _, route := range routes {
		res = post(ctx, hc, base, route, req)
		if res.OK || (res.HTTPStatus != http.StatusNotFound && res.HTTPStatus != http.StatusMethodNotAllowed) {
			break
		}
		earlier = append(earlier, res.Reason)
	}
	if !res.OK && len(earlier) > 1 {
		res.Reason = strings.Join(earlier, "; then ")
	}
	return res, nil
}

func post(ctx context.Context, hc *http.Client, base *url.URL, route string, req CompletionRequest) CompletionResult {
	u := *base
	p := strings.TrimSuffix(u.Path, "/")
	if !strings.HasSuffix(p, "/v1") {
		p += "/v1"
	}
	u.Path = p + "/" + route
	res := CompletionResult{API: route, URL: u.String()}

	maxTokens := req.MaxTokens
	if maxTokens == 0 {
		maxTokens = 16
	}
	body := map[string]any{"model": req.Model, "max_tokens": maxTokens, "temperature": 0}
	if route == APIChat {
		body["messages"] = []map[string]string{{"role": "user", "content": req.Prompt}}
	} else {
		body["prompt"] = req.Prompt
	}
	data, _ := json.Marshal(body)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, res.URL, bytes.NewReader(data))
	if err != nil {
		res.Reason = err.Error()
		return res
	}
	for k, vs := range req.Header {
		for _, v := range vs {
			hr.Header.Add(k, v)
		}
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/json")

	start := time.Now()
	resp, err := hc.Do(hr)
	if err != nil {
		res.Latency = time.Since(start)
		res.Reason = fmt.Sprintf("POST %s: %v", res.URL, err)
		if ctx.Err() != nil {
			res.Reason = fmt.Sprintf("POST %s: no answer within the bound: %v", res.URL, err)
		}
		return res
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	res.Latency = time.Since(start)
	res.HTTPStatus = resp.StatusCode
	if err != nil {
		res.Reason = fmt.Sprintf("read answer from %s: %v", res.URL, err)
		return res
	}
	if resp.StatusCode != http.StatusOK {
		res.Reason = fmt.Sprintf("POST %s: HTTP %d: %s", res.URL, resp.StatusCode, prefix(strings.TrimSpace(string(raw)), AnswerPrefixLen))
		return res
	}
	var out struct {
		Choices []struct {
			Text    string `json:"text"`
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		res.Reason = fmt.Sprintf("answer from %s is not JSON: %v", res.URL, err)
		return res
	}
	answer := ""
	if len(out.Choices) > 0 {
		answer = out.Choices[0].Text
		if route == APIChat || answer == "" {
			answer = out.Choices[0].Message.Content
		}
	}
	if strings.TrimSpace(answer) == "" {
		res.Reason = fmt.Sprintf("empty answer from %s (%d choices)", res.URL, len(out.Choices))
		return res
	}
	res.OK = true
	res.Answer = prefix(answer, AnswerPrefixLen)
	return res
}

// prefix keeps the first n characters (runes) of s.
func prefix(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n])
}

// SplitModelURL accepts the intent's model URL with or without its route:
// ".../v1/completions" and ".../v1/chat/completions" name the API to use,
// a base URL leaves the choice to the check.
func SplitModelURL(u string) (base, api string) {
	u = strings.TrimSuffix(u, "/")
	switch {
	case strings.HasSuffix(u, "/"+APIChat):
		return strings.TrimSuffix(u, "/"+APIChat), APIChat
	case strings.HasSuffix(u, "/"+APICompletions):
		return strings.TrimSuffix(u, "/"+APICompletions), APICompletions
	}
	return u, ""
}
