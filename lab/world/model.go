package world

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ModelAnswer is what the lab's model answers to every prompt: the word the
// intent's smoke prompt asks for.
const ModelAnswer = "ready"

// modelServer is the OpenAI-compatible completion endpoint of the lab's
// model Deployment, served in-process on loopback.
type modelServer struct {
	model    string
	listener net.Listener
	srv      *http.Server
	done     chan struct{}
	failing  atomic.Bool
	requests atomic.Int64

	mu     sync.Mutex
	status int // HTTP status while failing
}

func startModelServer(addr, model string) (*modelServer, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for the model endpoint on %s: %w", addr, err)
	}
	m := &modelServer{model: model, listener: l, done: make(chan struct{}), status: http.StatusInternalServerError}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", m.completions)
	mux.HandleFunc("POST /v1/chat/completions", m.chat)
	mux.HandleFunc("GET /v1/models", m.models)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		if m.failing.Load() {
			w.WriteHeader(m.failStatus())
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	m.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(m.done)
		_ = m.srv.Serve(l)
	}()
	return m, nil
}

func (m *modelServer) addr() string { return m.listener.Addr().String() }

func (m *modelServer) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := m.srv.Shutdown(ctx)
	<-m.done
	if err != nil {
		return fmt.Errorf("stop model endpoint: %w", err)
	}
	return nil
}

func (m *modelServer) setFailing(on bool, status int) {
	m.mu.Lock()
	if status != 0 {
		m.status = status
	}
	m.mu.Unlock()
	m.failing.Store(on)
}

func (m *modelServer) failStatus() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.status
}

type completionRequest struct {
	Model     string `json:"model"`
	Prompt    any    `json:"prompt"`
	MaxTokens int    `json:"max_tokens"`
	Messages  []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

// read decodes the request and answers the errors a vLLM server gives;
// ok false means the answer was written.
func (m *modelServer) read(w http.ResponseWriter, r *http.Request) (completionRequest, bool) {
	m.requests.Add(1)
	var req completionRequest
	if m.failing.Load() {
		writeError(w, m.failStatus(), "InternalServerError", "lab fault: the model server fails every request")
		return req, false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "BadRequestError", "request body is not JSON: "+err.Error())
		return req, false
	}
	if req.Model != m.model {
		writeError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return req, false
	}
	return req, true
}

func (m *modelServer) completions(w http.ResponseWriter, r *http.Request) {
	req, ok := m.read(w, r)
	if !ok {
		return
	}
	if p, _ := req.Prompt.(string); strings.TrimSpace(p) == "" {
		writeError(w, http.StatusBadRequest, "BadRequestError", "prompt is required")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": fmt.Sprintf("cmpl-lab-%d", m.requests.Load()), "object": "text_completion",
		"created": time.Now().Unix(), "model": m.model,
		"choices": []any{map[string]any{"index": 0, "text": " " + ModelAnswer, "finish_reason": "stop", "logprobs": nil}},
		"usage":   map[string]any{"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9},
	})
}

func (m *modelServer) chat(w http.ResponseWriter, r *http.Request) {
	req, ok := m.read(w, r)
	if !ok {
		return
	}
	if len(req.Messages) == 0 {
		writeError(w, http.StatusBadRequest, "BadRequestError", "messages are required")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": fmt.Sprintf("chatcmpl-lab-%d", m.requests.Load()), "object": "chat.completion",
		"created": time.Now().Unix(), "model": m.model,
		"choices": []any{map[string]any{
			"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": ModelAnswer},
		}},
		"usage": map[string]any{"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9},
	})
}

func (m *modelServer) models(w http.ResponseWriter, _ *http.Request) {
	if m.failing.Load() {
		writeError(w, m.failStatus(), "InternalServerError", "lab fault: the model server fails every request")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"object": "list",
		"data":   []any{map[string]any{"id": m.model, "object": "model", "owned_by": "lab"}},
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, kind, msg string) {
	writeJSON(w, status, map[string]any{"object": "error", "message": msg, "type": kind, "code": status})
}

// errModelClosed is returned by dials once the World is closed.
var errModelClosed = errors.New("lab model endpoint is closed")
