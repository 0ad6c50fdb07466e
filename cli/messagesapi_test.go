package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// scriptedModel stands in for the Anthropic Messages API on 127.0.0.1, so
// that the real Claude Code CLI (`claude -p` with ANTHROPIC_BASE_URL) can
// run a round with nothing leaving the machine. It speaks the subset that
// Claude Code uses: POST /v1/messages, streamed as server-sent events
// (message_start, content_block_start, input_json_delta, content_block_stop,
// message_delta, message_stop) or as one JSON message, and
// POST /v1/messages/count_tokens.
//
// Its "model" knows nothing of rounds: each turn it reads the last tool
// result Claude Code passed back and answers with the call that result's
// next_call names. When a result is approval_required it hands the request
// to the person (sign) and makes the same call with the approval; when
// round_status says the round waits (the soak), it lets time pass (wait).
// A tool Claude Code holds back (deferred loading) is first fetched with
// Claude Code's ToolSearch. The round ends when close_round answers ok, or
// when a result leaves the model nowhere to go (stuck).
//
// Usage is not metered: every answer reports one token each way, so Claude
// Code never compacts the conversation (a scripted model cannot summarise).
type scriptedModel struct {
	// server is the MCP server's name in Claude Code: its tools are
	// mcp__<server>__<tool>.
	server string
	// sign is the person: it signs an approval request.
	sign func(request string) (string, error)
	// wait lets time pass until t (the lab moves its clock).
	wait func(t time.Time)
	// poll is the pause before calling a step in progress again.
	poll time.Duration
	// maxCalls bounds the tool calls of the whole run.
	maxCalls int

	mu       sync.Mutex
	nextID   int
	pending  map[string]*issued    // tool_use id → the call it carries
	answered map[string]modelReply // tool_use id whose result was answered → the answer (a retried request gets the same)
	loaded   map[string]bool       // tools ToolSearch has loaded
	last     string                // the tool_use id of the last call issued
	// What the run saw.
	calls        []callRecord
	searches     int // ToolSearch calls
	requests     int // main-loop requests
	sideRequests int // other requests (titles, suggestions)
	countTokens  int
	approvals    int
	waits        int
	closed       bool
	stuck        string
	problems     []string // contract breaches seen (the test fails on any)
	others       []string // requests to paths it does not serve
}

// issued is a tool call the model made and awaits the result of.
type issued struct {
	tool string // the mcp-patch tool, or "ToolSearch"
	args map[string]any
	// then is the call to make once ToolSearch has loaded its tool.
	then   *modelCall
	sentAt time.Time
}

// callRecord is one MCP tool call as Claude Code carried it.
type callRecord struct {
	Tool, Node, Status string
	Args               map[string]any
	IsError            bool
	// Chars is the length of the result text Claude Code passed to the model.
	Chars int
	// Took is from the end of the model's answer to Claude Code's next
	// request carrying the result.
	Took time.Duration
	// WithApproval: the call carried a person's approval.
	WithApproval bool
}

// modelCall is a call the model decides to make.
type modelCall struct {
	Tool string
	Args map[string]any
}

// modelReply is one assistant turn: a tool call or closing words.
type modelReply struct {
	call *modelCall // tool name as Claude Code names it
	id   string     // the tool_use id of call
	text string
}

func newScriptedModel(server string, sign func(string) (string, error), wait func(time.Time)) *scriptedModel {
	return &scriptedModel{server: server, sign: sign, wait: wait, poll: 500 * time.Millisecond, maxCalls: 3000,
		pending: map[string]*issued{}, answered: map[string]modelReply{}, loaded: map[string]bool{}}
}

// start serves the model on a free loopback port until the test ends and
// returns its base URL (for ANTHROPIC_BASE_URL).
func (m *scriptedModel) start(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: m, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// The request fields the model reads.
type messagesRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
	Tools []struct {
		Name         string `json:"name"`
		DeferLoading bool   `json:"defer_loading"`
	} `json:"tools"`
}

type contentBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   bool            `json:"is_error"`
	ToolName  string          `json:"tool_name"` // tool_reference
}

func blocks(raw json.RawMessage) []contentBlock {
	var bs []contentBlock
	if json.Unmarshal(raw, &bs) == nil {
		return bs
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []contentBlock{{Type: "text", Text: s}}
	}
	return nil
}

func (m *scriptedModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch r.URL.Path {
	case "/v1/messages/count_tokens":
		m.mu.Lock()
		m.countTokens++
		m.mu.Unlock()
		// About four characters a token, as Claude Code itself estimates.
		answerJSON(w, map[string]any{"input_tokens": len(body) / 4})
		return
	case "/v1/messages":
	default:
		m.mu.Lock()
		m.others = append(m.others, r.Method+" "+r.URL.Path)
		m.mu.Unlock()
		http.NotFound(w, r)
		return
	}
	var req messagesRequest
	if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) == 0 {
		http.Error(w, `{"type":"error","error":{"type":"invalid_request_error","message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	reply, pause := m.turn(&req, body)
	if pause > 0 {
		select {
		case <-r.Context().Done():
			return
		case <-time.After(pause):
		}
	}
	m.write(w, req, reply)
}

// offer is how Claude Code offers a tool in one request: with its schema
// in tools (defer_loading: until ToolSearch loads it), or by name only, in
// the list of deferred tools it writes into the conversation.
type offer struct {
	inTools, deferred map[string]bool
	body              []byte
}

func (o offer) listed(name string) bool { return bytes.Contains(o.body, []byte(name)) }

// turn decides the next assistant turn, and how long to think first.
func (m *scriptedModel) turn(req *messagesRequest, body []byte) (modelReply, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	prefix := "mcp__" + m.server + "__"
	deferred := offer{inTools: map[string]bool{}, deferred: map[string]bool{}, body: body}
	main := false
	for _, t := range req.Tools {
		if t.Name == "ToolSearch" || strings.HasPrefix(t.Name, prefix) {
			main = true
		}
		deferred.inTools[t.Name], deferred.deferred[t.Name] = true, t.DeferLoading
	}
	if !main {
		m.sideRequests++
		return modelReply{text: "ok"}, 0
	}
	m.requests++
	if m.stuck != "" || m.closed {
		return modelReply{text: "The round is over."}, 0
	}
	// The result of the last call: in a user message after it (Claude Code
	// may add messages of its own after the result, such as the list of
	// deferred tools).
	var res *contentBlock
	for i := len(req.Messages) - 1; i >= 0 && res == nil && m.last != ""; i-- {
		if req.Messages[i].Role != "user" {
			continue
		}
		for _, b := range blocks(req.Messages[i].Content) {
			if b.Type == "tool_result" && b.ToolUseID == m.last {
				res = &b
			}
		}
	}
	if m.last == "" { // the first turn
		return m.issue(&modelCall{Tool: "round_status", Args: map[string]any{}}, deferred, prefix), 0
	}
	if res == nil {
		if prev, ok := m.answered[m.last]; ok { // the turn after ours was retried
			return prev, 0
		}
		m.stuck = "Claude Code sent no result for " + m.last
		return modelReply{text: m.stuck}, 0
	}
	if prev, ok := m.answered[res.ToolUseID]; ok {
		return prev, 0
	}
	is := m.pending[res.ToolUseID]
	delete(m.pending, res.ToolUseID)
	reply, pause := m.afterResult(is, res, deferred, prefix)
	m.answered[res.ToolUseID] = reply
	return reply, pause
}

// afterResult reads the result of call is and decides what comes next.
func (m *scriptedModel) afterResult(is *issued, res *contentBlock, deferred offer, prefix string) (modelReply, time.Duration) {
	took := time.Since(is.sentAt)
	if is.tool == "ToolSearch" {
		for _, b := range blocks(res.Content) {
			if b.Type == "tool_reference" && b.ToolName == prefix+is.then.Tool {
				m.loaded[b.ToolName] = true
			}
		}
		if !m.loaded[prefix+is.then.Tool] {
			m.stuck = fmt.Sprintf("ToolSearch did not load %s: %s", is.then.Tool, res.Content)
			return modelReply{text: m.stuck}, 0
		}
		return m.issue(is.then, deferred, prefix), 0
	}
	var text strings.Builder
	for _, b := range blocks(res.Content) {
		if b.Type == "text" {
			text.WriteString(b.Text)
		}
	}
	node, _ := is.args["node"].(string)
	_, withApproval := is.args["approval"]
	rec := callRecord{Tool: is.tool, Node: node, Args: is.args, IsError: res.IsError, Chars: text.Len(), Took: took, WithApproval: withApproval}
	for _, marker := range truncationMarkers {
		if strings.Contains(text.String(), marker) {
			m.problems = append(m.problems, fmt.Sprintf("%s %s: Claude Code cut or set aside the result (%q, %d characters)", is.tool, node, marker, text.Len()))
		}
	}
	d := decideNext(is.tool, is.args, text.String(), res.IsError)
	rec.Status = d.status
	m.calls = append(m.calls, rec)
	if d.problem != "" {
		m.problems = append(m.problems, is.tool+" "+node+": "+d.problem)
	}
	switch {
	case d.closed:
		m.closed = true
		return modelReply{text: "The round is closed."}, 0
	case d.stuck != "":
		m.stuck = is.tool + " " + node + ": " + d.stuck
		return modelReply{text: "I cannot go on: " + m.stuck}, 0
	case len(m.calls) >= m.maxCalls:
		m.stuck = fmt.Sprintf("gave up after %d calls", len(m.calls))
		return modelReply{text: m.stuck}, 0
	}
	next := d.call
	if d.signRequest != "" {
		approval, err := m.sign(d.signRequest)
		if err != nil {
			m.stuck = fmt.Sprintf("%s: the person could not sign: %v", is.tool, err)
			return modelReply{text: m.stuck}, 0
		}
		m.approvals++
		next.Args["approval"] = approval
	}
	if !d.waitUntil.IsZero() {
		m.waits++
		m.wait(d.waitUntil)
	}
	var pause time.Duration
	if d.status == "in_progress" {
		pause = m.poll
	}
	return m.issue(next, deferred, prefix), pause
}

// truncationMarkers are what Claude Code puts in place of, or around, a
// result too large for the model (persisted to a file or truncated).
var truncationMarkers = []string{"<persisted-output>", "<truncated-output>", "The tool output was truncated", "exceeds maximum allowed tokens"}

// issue makes call c, through ToolSearch first when Claude Code defers it.
func (m *scriptedModel) issue(c *modelCall, deferred offer, prefix string) modelReply {
	m.nextID++
	id := fmt.Sprintf("toolu_%06d", m.nextID)
	m.last = id
	name := prefix + c.Tool
	direct := deferred.inTools[name] && (!deferred.deferred[name] || m.loaded[name])
	if !direct && !deferred.listed(name) {
		m.stuck = "Claude Code does not offer " + name
		return modelReply{text: m.stuck}
	}
	if !direct {
		m.searches++
		m.pending[id] = &issued{tool: "ToolSearch", then: c}
		return modelReply{call: &modelCall{Tool: "ToolSearch", Args: map[string]any{"query": "select:" + name}}, id: id}
	}
	m.pending[id] = &issued{tool: c.Tool, args: c.Args}
	return modelReply{call: &modelCall{Tool: name, Args: c.Args}, id: id}
}

// nextStep is what the model makes of one tool result.
type nextStep struct {
	status      string
	call        *modelCall
	signRequest string    // sign this and add it to call as approval
	waitUntil   time.Time // let time pass first
	closed      bool
	stuck       string // nowhere to go
	problem     string // a contract breach (the run goes on)
}

// decideNext is the whole of the model's judgement: follow next_call; sign
// an approval request and make the same call with it; let the soak pass
// when round_status says the round waits; stop when close_round is ok.
func decideNext(tool string, args map[string]any, text string, isError bool) nextStep {
	var r struct {
		Status     string   `json:"status"`
		Reasons    []string `json:"reasons"`
		NextAction string   `json:"next_action"`
		Approval   *struct {
			Request string `json:"request"`
		} `json:"approval"`
		NextCall *struct {
			Tool      string         `json:"tool"`
			Arguments map[string]any `json:"arguments"`
		} `json:"next_call"`
		RawRound json.RawMessage `json:"round"` // round_status: the round; elsewhere its id
	}
	dec := json.NewDecoder(strings.NewReader(text))
	if err := dec.Decode(&r); err != nil || r.Status == "" {
		return nextStep{stuck: fmt.Sprintf("the result is not the tool's JSON (%v): %.200s", err, text)}
	}
	var round *struct {
		Phase string `json:"phase"`
		Next  *struct {
			WaitUntil time.Time `json:"wait_until"`
		} `json:"next"`
	}
	if tool == "round_status" && len(r.RawRound) > 0 && r.RawRound[0] == '{' {
		if err := json.Unmarshal(r.RawRound, &round); err != nil {
			return nextStep{stuck: fmt.Sprintf("round_status: the round is not what it was: %v", err)}
		}
	}
	d := nextStep{status: r.Status}
	if wantErr := r.Status == "refused" || r.Status == "failed"; isError != wantErr {
		d.problem = fmt.Sprintf("status %s came with is_error=%v", r.Status, isError)
	}
	var next *modelCall
	if r.NextCall != nil {
		next = &modelCall{Tool: r.NextCall.Tool, Args: map[string]any{}}
		for k, v := range r.NextCall.Arguments {
			next.Args[k] = v
		}
	}
	switch {
	case tool == "close_round" && r.Status == "ok":
		d.closed = true
	case round != nil && round.Phase == "closed":
		d.closed = true
	case r.Status == "approval_required":
		switch {
		case r.Approval == nil || r.Approval.Request == "":
			d.stuck = "approval_required without a request to sign"
		case next == nil || next.Tool != tool:
			d.stuck = "approval_required without the same call again as next_call"
		default:
			d.call, d.signRequest = next, r.Approval.Request
		}
	case next != nil:
		d.call = next
	case round != nil && round.Next != nil && !round.Next.WaitUntil.IsZero():
		d.call, d.waitUntil = &modelCall{Tool: "round_status", Args: map[string]any{}}, round.Next.WaitUntil.Add(time.Second)
	default:
		d.stuck = fmt.Sprintf("%s names no next call: %s (reasons: %s)", r.Status, r.NextAction, strings.Join(r.Reasons, "; "))
	}
	return d
}

// write sends reply as Claude Code asked: streamed events or one message.
func (m *scriptedModel) write(w http.ResponseWriter, req messagesRequest, reply modelReply) {
	m.mu.Lock()
	m.nextID++
	msgID := fmt.Sprintf("msg_%06d", m.nextID)
	toolID := reply.id
	m.mu.Unlock()
	stop := "end_turn"
	var block map[string]any
	var input []byte
	if reply.call != nil {
		stop = "tool_use"
		input, _ = json.Marshal(reply.call.Args)
		block = map[string]any{"type": "tool_use", "id": toolID, "name": reply.call.Tool, "input": map[string]any{}}
	} else {
		block = map[string]any{"type": "text", "text": ""}
	}
	usage := map[string]any{"input_tokens": 1, "output_tokens": 1}
	message := map[string]any{"id": msgID, "type": "message", "role": "assistant", "model": req.Model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": usage}
	if !req.Stream {
		if reply.call != nil {
			block["input"] = reply.call.Args
		} else {
			block["text"] = reply.text
		}
		message["content"], message["stop_reason"] = []any{block}, stop
		answerJSON(w, message)
		m.sent(toolID)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	flusher, _ := w.(http.Flusher)
	event := func(name string, data map[string]any) {
		data["type"] = name
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	event("message_start", map[string]any{"message": message})
	event("content_block_start", map[string]any{"index": 0, "content_block": block})
	if reply.call != nil {
		// The input in two pieces, as the API streams it.
		half := len(input) / 2
		for _, part := range [][]byte{input[:half], input[half:]} {
			event("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "input_json_delta", "partial_json": string(part)}})
		}
	} else {
		event("content_block_delta", map[string]any{"index": 0, "delta": map[string]any{"type": "text_delta", "text": reply.text}})
	}
	event("content_block_stop", map[string]any{"index": 0})
	event("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 1}})
	event("message_stop", map[string]any{})
	m.sent(toolID)
}

// sent marks when the call left the model, to time the call.
func (m *scriptedModel) sent(toolID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if is := m.pending[toolID]; is != nil {
		is.sentAt = time.Now()
	}
}

func answerJSON(w http.ResponseWriter, v any) {
	var b bytes.Buffer
	if err := json.NewEncoder(&b).Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b.Bytes())
}

// TestDecideNext: the scripted model's judgement, one rule per case.
func TestDecideNext(t *testing.T) {
	soak := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, tool, text string
		isError          bool
		want             func(nextStep) string
	}{
		{name: "follows next_call", tool: "round_status",
			text: `{"status":"ok","next_call":{"tool":"drain_node","arguments":{"node":"gpu-01"}}}`,
			want: func(d nextStep) string {
				if d.call == nil || d.call.Tool != "drain_node" || d.call.Args["node"] != "gpu-01" || d.signRequest != "" {
					return fmt.Sprintf("call %+v", d.call)
				}
				return ""
			}},
		{name: "an error result with a next call is followed", tool: "round_status", isError: true,
			text: `{"status":"refused","reasons":["no round is open"],"next_call":{"tool":"plan_round","arguments":{"round":"2026-12"}}}`,
			want: func(d nextStep) string {
				if d.call == nil || d.call.Tool != "plan_round" || d.problem != "" {
					return fmt.Sprintf("call %+v problem %q", d.call, d.problem)
				}
				return ""
			}},
		{name: "approval_required signs and calls again", tool: "drain_node",
			text: `{"status":"approval_required","approval":{"request":"REQ"},"next_call":{"tool":"drain_node","arguments":{"node":"cp-1"}}}`,
			want: func(d nextStep) string {
				if d.call == nil || d.call.Tool != "drain_node" || d.signRequest != "REQ" {
					return fmt.Sprintf("call %+v sign %q", d.call, d.signRequest)
				}
				return ""
			}},
		{name: "approval_required naming another call is stuck", tool: "drain_node",
			text: `{"status":"approval_required","approval":{"request":"REQ"},"next_call":{"tool":"round_status","arguments":{}}}`,
			want: func(d nextStep) string {
				if d.stuck == "" {
					return "not stuck"
				}
				return ""
			}},
		{name: "the soak waits, then asks again", tool: "round_status",
			text: `{"status":"ok","round":{"phase":"closing","next":{"wait_until":"2026-12-03T10:00:00Z"}}}`,
			want: func(d nextStep) string {
				if d.call == nil || d.call.Tool != "round_status" || !d.waitUntil.Equal(soak.Add(time.Second)) {
					return fmt.Sprintf("call %+v wait %s", d.call, d.waitUntil)
				}
				return ""
			}},
		{name: "a round id is not a round", tool: "plan_round", isError: true,
			text: `{"status":"failed","round":"2026-12","next_call":{"tool":"round_status","arguments":{}}}`,
			want: func(d nextStep) string {
				if d.call == nil || d.call.Tool != "round_status" {
					return fmt.Sprintf("call %+v stuck %q", d.call, d.stuck)
				}
				return ""
			}},
		{name: "close_round ok closes", tool: "close_round", text: `{"status":"ok","next_call":{"tool":"round_status","arguments":{}}}`,
			want: func(d nextStep) string {
				if !d.closed {
					return "not closed"
				}
				return ""
			}},
		{name: "no next call is stuck", tool: "verify_node", text: `{"status":"failed","next_action":"Ask a person."}`, isError: true,
			want: func(d nextStep) string {
				if d.stuck == "" || !strings.Contains(d.stuck, "Ask a person.") {
					return "stuck " + d.stuck
				}
				return ""
			}},
		{name: "isError must match the status", tool: "round_status", text: `{"status":"ok","next_call":{"tool":"x","arguments":{}}}`, isError: true,
			want: func(d nextStep) string {
				if d.problem == "" {
					return "no problem noted"
				}
				return ""
			}},
		{name: "text that is not the tool's JSON is stuck", tool: "round_status", text: `Error: something`,
			want: func(d nextStep) string {
				if d.stuck == "" {
					return "not stuck"
				}
				return ""
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if msg := tc.want(decideNext(tc.tool, nil, tc.text, tc.isError)); msg != "" {
				t.Error(msg)
			}
		})
	}
}
