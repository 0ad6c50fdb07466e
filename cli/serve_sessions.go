package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/config"
)

// sessionLimits bound the MCP sessions of the HTTP server (config
// serve.max_sessions, serve.max_sessions_per_token, serve.session_idle_minutes).
// A stateless request (protocol 2026-07-28 and later) counts as a session
// of its token while it is in flight.
type sessionLimits struct {
	// Total is the most live sessions in all; PerToken the most for one
	// bearer token.
	Total, PerToken int
	// Idle closes a session no request touched for this long.
	Idle time.Duration
}

func sessionLimitsOf(s config.Serve) sessionLimits {
	return sessionLimits{Total: s.MaxSessions, PerToken: s.MaxSessionsPerToken, Idle: time.Duration(s.SessionIdleMinutes) * time.Minute}
}

// sessionBook keeps the live MCP sessions of the HTTP server and decides
// which to close: a new session past a cap closes the oldest idle one (of
// its token first, then of all), a session idle for lim.Idle is closed,
// and a new session is refused only when every session is busy with a
// request. Decisions are made under the lock; the closing is done by the
// caller, outside it.
type sessionBook struct {
	lim sessionLimits
	now func() time.Time

	mu        sync.Mutex
	live      map[string]*liveSession // by session id
	pending   map[string]int          // initializes and stateless requests under way, by token key
	lastSweep time.Time
}

type liveSession struct {
	id, token string
	last      time.Time // the end of its last request
	busy      int       // requests in flight (POSTs; a GET stream does not count)
}

func newSessionBook(lim sessionLimits, now func() time.Time) *sessionBook {
	return &sessionBook{lim: lim, now: now, live: map[string]*liveSession{}, pending: map[string]int{}}
}

// reserve makes room for a new session of token: it answers the sessions
// to close (the oldest idle ones past a cap) and false when the caps are
// reached with every session busy (nothing is reserved then). A reserved
// slot is given back by admitted.
func (b *sessionBook) reserve(token string) (closeIDs []string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	mine, all := 0, 0
	for _, s := range b.live {
		if s.token == token {
			mine++
		}
	}
	for _, n := range b.pending {
		all += n
	}
	mine += b.pending[token]
	all += len(b.live)
	var evict []*liveSession
	for ; b.lim.PerToken > 0 && mine >= b.lim.PerToken; mine, all = mine-1, all-1 {
		s := b.oldestIdle(token, evict)
		if s == nil {
			return nil, false
		}
		evict = append(evict, s)
	}
	for ; b.lim.Total > 0 && all >= b.lim.Total; all-- {
		s := b.oldestIdle("", evict)
		if s == nil {
			return nil, false
		}
		evict = append(evict, s)
	}
	for _, s := range evict {
		delete(b.live, s.id)
		closeIDs = append(closeIDs, s.id)
	}
	b.pending[token]++
	return closeIDs, true
}

// oldestIdle is the live session (of token, or of any when token is "")
// idle the longest, not among skip; nil when every one is busy.
func (b *sessionBook) oldestIdle(token string, skip []*liveSession) *liveSession {
	var best *liveSession
	for _, s := range b.live {
		if s.busy > 0 || token != "" && s.token != token || contains(skip, s) {
			continue
		}
		if best == nil || s.last.Before(best.last) || s.last.Equal(best.last) && s.id < best.id {
			best = s
		}
	}
	return best
}

func contains(list []*liveSession, s *liveSession) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// admitted gives back token's reserved slot and, when the initialize
// made a session (id not ""), records it as live. A stateless request
// gives its slot back with id "" when it ends.
func (b *sessionBook) admitted(token, id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pending[token]--; b.pending[token] <= 0 {
		delete(b.pending, token)
	}
	if id != "" {
		b.live[id] = &liveSession{id: id, token: token, last: b.now()}
	}
}

// begin marks a request of session id in flight (busy sessions are never
// closed for room); the answer ends it. Unknown ids are left to the SDK
// (it answers 404).
func (b *sessionBook) begin(id string, busy bool) (end func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.live[id]
	if !ok {
		return func() {}
	}
	s.last = b.now()
	if !busy {
		return func() {}
	}
	s.busy++
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		s.busy--
		s.last = b.now()
	}
}

// forget drops session id (closed by its client).
func (b *sessionBook) forget(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.live, id)
}

// expired answers the sessions idle for lim.Idle or longer and drops
// them; at most one sweep a second (every request calls it).
func (b *sessionBook) expired() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if b.lim.Idle <= 0 || now.Sub(b.lastSweep) < time.Second {
		return nil
	}
	b.lastSweep = now
	var out []string
	for id, s := range b.live {
		if s.busy == 0 && now.Sub(s.last) >= b.lim.Idle {
			delete(b.live, id)
			out = append(out, id)
		}
	}
	return out
}

// count is how many sessions are live.
func (b *sessionBook) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.live)
}

// tokenKey names a bearer token in the book without keeping it.
func tokenKey(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:8])
}

// refuseFull is the answer to a new session or stateless request while
// the caps are reached and every session is busy.
func refuseFull(w http.ResponseWriter) {
	w.Header().Set("Retry-After", "5")
	http.Error(w, "too many MCP sessions, all busy: try again shortly", http.StatusServiceUnavailable)
}

// sessionCloseWait bounds how long a request waits for the sessions it
// closes to make room: a session is closed only once its requests in
// flight end (a tool call can run for minutes; one whose initialize was
// not yet booked looks idle), and one client's request must not wait on
// another's. The rest close in the background.
const sessionCloseWait = 2 * time.Second

// sessionCloser closes the server's MCP sessions by id (the book decided
// which, under its lock; the closing happens outside it), waiting at most
// sessionCloseWait.
func sessionCloser(server *mcp.Server, log *slog.Logger) func(ids []string, why string) {
	return func(ids []string, why string) {
		if len(ids) == 0 {
			return
		}
		want := make(map[string]bool, len(ids))
		for _, id := range ids {
			want[id] = true
		}
		var wg sync.WaitGroup
		for ss := range server.Sessions() {
			if want[ss.ID()] {
				wg.Go(func() {
					if err := ss.Close(); err != nil {
						log.Debug("closing an MCP session", "why", why, "err", err)
					}
				})
			}
		}
		closed := make(chan struct{})
		go func() { wg.Wait(); close(closed) }()
		select {
		case <-closed:
			log.Debug("MCP sessions closed", "why", why, "count", len(ids))
		case <-time.After(sessionCloseWait):
			log.Info("MCP sessions closing in the background: a request of theirs is still in flight", "why", why, "count", len(ids))
		}
	}
}

// boundedSessions serves stateful MCP over next while keeping the live
// sessions within book's limits: an initialize (a POST without
// Mcp-Session-Id) past a cap first closes the oldest idle session (or is
// answered 503 when every session is busy), every request sweeps the
// sessions idle too long, and a DELETE drops its session from the book.
// token is the request's bearer token (checked before).
func boundedSessions(server *mcp.Server, next http.Handler, book *sessionBook, closeIDs func([]string, string)) http.Handler {
	exists := func(id string) bool {
		for ss := range server.Sessions() {
			if ss.ID() == id {
				return true
			}
		}
		return false
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		closeIDs(book.expired(), "idle")
		id := r.Header.Get("Mcp-Session-Id")
		switch {
		case id != "":
			end := book.begin(id, r.Method == http.MethodPost)
			defer end()
			next.ServeHTTP(w, r)
			if r.Method == http.MethodDelete {
				book.forget(id)
			}
		case r.Method == http.MethodPost:
			key := tokenKey(r.Header.Get("Authorization"))
			evict, ok := book.reserve(key)
			if !ok {
				refuseFull(w)
				return
			}
			closeIDs(evict, "session cap")
			next.ServeHTTP(w, r)
			made := w.Header().Get("Mcp-Session-Id")
			if made != "" && !exists(made) {
				made = "" // the initialize failed and the SDK closed it
			}
			book.admitted(key, made)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// boundedStateless serves stateless MCP (protocol 2026-07-28 and later)
// over next within the same book as the sessions: a request in flight
// holds a session's place of its token until it is answered, so it makes
// room as a new session does (the oldest idle session past a cap is
// closed) and is answered 503 as one is while every place is busy. It
// leaves no session behind.
func boundedStateless(next http.Handler, book *sessionBook, closeIDs func([]string, string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		closeIDs(book.expired(), "idle")
		key := tokenKey(r.Header.Get("Authorization"))
		evict, ok := book.reserve(key)
		if !ok {
			refuseFull(w)
			return
		}
		defer book.admitted(key, "")
		closeIDs(evict, "session cap")
		next.ServeHTTP(w, r)
	})
}
