package cli

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/net/netutil"

	"github.com/mcp-patch/mcp-patch/config"
	"github.com/mcp-patch/mcp-patch/tools"
)

// runServe is `mcp-patch serve` once its flags are parsed (serve_cmd.go).
func runServe(ctx context.Context, g *globals, f serveFlags, stdio IO) error {
	httpAddr, tokenFile, tokenEnv, tlsCert, tlsKey, metricsAddr := &f.httpAddr, &f.tokenFile, &f.tokenEnv, &f.tlsCert, &f.tlsKey, &f.metricsAddr
	c, err := g.load(stdio.Getenv)
	if err != nil {
		return err
	}
	if *httpAddr != "" {
		c.Serve.HTTP = *httpAddr
	}
	if *tokenFile != "" {
		c.Serve.TokenFile = *tokenFile
	}
	if *tokenEnv != "" {
		c.Serve.TokenEnv = *tokenEnv
	}
	if *tlsCert != "" || *tlsKey != "" {
		c.Serve.TLSCert, c.Serve.TLSKey = *tlsCert, *tlsKey
	}
	if err := c.Validate(); err != nil {
		return err
	}
	// On stdio the client shows every stderr line as a server error: warn
	// and above only, unless --log-level asks for more.
	if c.Serve.HTTP == "" && !g.set("log-level") {
		g.logLevel = "warn"
	}
	log, err := g.logger(stdio.Stderr)
	if err != nil {
		return usageError{err}
	}
	configFile := g.configFile
	if configFile == "" {
		configFile = stdio.Getenv("MCP_PATCH_CONFIG")
	}
	warnTrust(log, &c, configFile)
	if limit, ok := memoryLimit(c.Serve.MemoryLimitMiB, stdio.Getenv("GOMEMLIMIT")); ok && stdio.SetMemoryLimit != nil {
		stdio.SetMemoryLimit(limit)
		log.Info("soft memory limit", "mib", c.Serve.MemoryLimitMiB)
	}
	d, cleanup, err := buildDeps(ctx, &c, log, stdio.Getenv)
	if err != nil {
		return err
	}
	defer cleanup()
	go startLeaderElection(ctx, d, log)
	go retakeWindowLease(ctx, d, log)
	server := tools.NewServer(tools.Builtin(), d, Version)
	if *metricsAddr != "" {
		stopMetrics, err := serveMetrics(ctx, *metricsAddr, d.Ops.Metrics.Handler(), stdio, log)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	if c.Serve.HTTP == "" {
		log.Info("serving MCP on stdio", "mode", c.Mode)
		err := server.Run(ctx, &mcp.StdioTransport{})
		if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	return serveHTTP(ctx, &c, server, d.Ops.Metrics.Handler(), stdio, log)
}

// memoryLimit is the soft memory limit serve sets from
// serve.memory_limit_mib, in bytes; none (false) when it is 0 or the
// GOMEMLIMIT environment variable, which the Go runtime reads itself, is
// set.
func memoryLimit(mib int, gomemlimit string) (int64, bool) {
	if mib <= 0 || gomemlimit != "" {
		return 0, false
	}
	return int64(mib) << 20, true
}

// startLeaderElection starts this server's part in the election when
// leader_election is on, in the background so an unreachable API server
// does not hold up the MCP handshake; the first call that needs it starts
// it otherwise.
func startLeaderElection(ctx context.Context, d *tools.Deps, log *slog.Logger) {
	if _, err := d.Leadership(ctx); err != nil {
		log.Warn("leader election not started; the first destructive call tries again", "err", err)
	}
}

// retakeWindowLease takes the window Lease again when the journal shows a
// window open (this server restarted mid-window), in the background so
// an unreachable API server does not hold up the MCP handshake; the
// window's next step holds it in any case.
func retakeWindowLease(ctx context.Context, d *tools.Deps, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	node, err := d.RetakeWindowLease(ctx)
	switch {
	case err != nil:
		log.Warn("window Lease not taken again at start; the window's next step holds it or stops", "node", node, "err", err)
	case node != "":
		log.Info("window Lease taken again: the journal shows this window open", "node", node)
	}
}

// serveMetrics serves /metrics alone on addr until stop is called.
func serveMetrics(ctx context.Context, addr string, h http.Handler, stdio IO, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-addr: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdio.Stderr, "mcp-patch: serving metrics on http://%s/metrics\n", ln.Addr())
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	return func() {
		shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shut); err != nil {
			log.Warn("metrics server shutdown", "err", err)
		}
	}, nil
}

// httpGuard checks the rules for the HTTP transport and returns the token.
func httpGuard(c *config.Config, getenv func(string) string) (string, error) {
	host, _, err := net.SplitHostPort(c.Serve.HTTP)
	if err != nil {
		return "", usagef("--http %q: %v", c.Serve.HTTP, err)
	}
	token := ""
	if c.Serve.TokenFile != "" {
		b, err := os.ReadFile(c.Serve.TokenFile)
		if err != nil {
			return "", fmt.Errorf("read token file: %w", err)
		}
		token = strings.TrimSpace(string(b))
	} else if c.Serve.TokenEnv != "" {
		token = strings.TrimSpace(getenv(c.Serve.TokenEnv))
	}
	if token == "" {
		return "", fmt.Errorf("serve --http needs a bearer token: set --token-file or the %s environment variable", c.Serve.TokenEnv)
	}
	if len(token) < 16 {
		return "", errors.New("the bearer token is shorter than 16 characters; use a long random one (e.g. openssl rand -hex 32)")
	}
	if !isLoopback(host) && (c.Serve.TLSCert == "" || c.Serve.TLSKey == "") {
		return "", fmt.Errorf("refusing to serve on non-loopback address %q without TLS: set --tls-cert and --tls-key", host)
	}
	return token, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func serveHTTP(ctx context.Context, c *config.Config, server *mcp.Server, metricsHandler http.Handler, stdio IO, log *slog.Logger) error {
	token, err := httpGuard(c, stdio.Getenv)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/", bearerHandler(server, token, sessionLimitsOf(c.Serve), log))
	mux.Handle("GET /metrics", bearerOnly(metricsHandler, token))
	handler := http.Handler(mux)
	ln, err := net.Listen("tcp", c.Serve.HTTP)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", c.Serve.HTTP, err)
	}
	scheme := "http"
	if c.Serve.TLSCert != "" {
		scheme = "https"
	}
	srv, ln := newHTTPServer(ln, handler)
	fmt.Fprintf(stdio.Stderr, "mcp-patch: serving MCP on %s://%s/ (bearer token required)\n", scheme, ln.Addr())
	errc := make(chan error, 1)
	go func() {
		if c.Serve.TLSCert != "" {
			errc <- srv.ServeTLS(ln, c.Serve.TLSCert, c.Serve.TLSKey)
		} else {
			errc <- srv.Serve(ln)
		}
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shut, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		return srv.Shutdown(shut)
	}
}

// bearerOnly serves h to requests carrying the bearer token (Prometheus:
// authorization.credentials_file in the scrape config).
func bearerOnly(h http.Handler, token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcp-patch"`)
			http.Error(w, "bearer token required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// The HTTP server's bounds: a slow or idle client cannot hold a connection
// or an MCP session for ever, nor open connections without limit.
const (
	httpReadHeaderTimeout = 10 * time.Second
	httpReadTimeout       = 30 * time.Second // a request body; streams answer on the write side
	httpIdleTimeout       = 60 * time.Second // an idle keep-alive connection
	httpMaxConnections    = 256
)

// newHTTPServer wraps a handler with the server's timeouts and caps the
// listener's connections; serve and lab up share it.
func newHTTPServer(ln net.Listener, handler http.Handler) (*http.Server, net.Listener) {
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout: httpReadTimeout, IdleTimeout: httpIdleTimeout}
	return srv, netutil.LimitListener(ln, httpMaxConnections)
}

// bearerHandler serves MCP over streamable HTTP on / and /mcp behind a
// bearer token (compared in constant time). A missing token answers 401
// with WWW-Authenticate: Bearer realm="mcp-patch" (error="invalid_token"
// for a wrong one) and the OAuth discovery and registration paths answer
// 404, so a client says "token missing" instead of starting an OAuth flow.
// Host and Origin must be loopback names when the server listens on
// loopback (DNS rebinding). Requests of protocol 2026-07-28 or later are
// served statelessly, as that revision requires on HTTP; older ones keep
// sessions, bounded by lim (boundedSessions: caps in all and per token,
// the oldest idle closed first, closed after lim.Idle without a request).
// A stateless request counts against the same caps while it is in flight
// (boundedStateless). An Mcp-Protocol-Version that is not a date
// (YYYY-MM-DD) is answered 400.
func bearerHandler(server *mcp.Server, token string, lim sessionLimits, log *slog.Logger) http.Handler {
	getServer := func(*http.Request) *mcp.Server { return server }
	// The SDK's own idle timeout is the book's too, a backstop.
	sdk := mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{Logger: log, SessionTimeout: lim.Idle})
	book, closeIDs := newSessionBook(lim, time.Now), sessionCloser(server, log)
	stateful := boundedSessions(server, sdk, book, closeIDs)
	stateless := boundedStateless(mcp.NewStreamableHTTPHandler(getServer, &mcp.StreamableHTTPOptions{Logger: log, Stateless: true}), book, closeIDs)
	mcpHandler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sl, err := servedStatelessly(r.Header.Get("Mcp-Protocol-Version"))
		switch {
		case err != nil:
			unsupportedVersion(w, r, err, log)
		case sl:
			stateless.ServeHTTP(w, r)
		default:
			stateful.ServeHTTP(w, r)
		}
	})
	mux := http.NewServeMux()
	for _, p := range []string{"/.well-known/", "/register", "/authorize", "/token"} {
		mux.Handle(p, http.NotFoundHandler())
	}
	guarded := checkOrigin(requireBearer(mcpHandler, token))
	mux.Handle("/{$}", guarded)
	mux.Handle("/mcp", guarded)
	return mux
}

// statelessProtocol is the first MCP revision served without sessions.
const statelessProtocol = "2026-07-28"

// servedStatelessly says whether a request's Mcp-Protocol-Version names
// statelessProtocol or a later revision. A revision is named by its date,
// compared as a date; a value that is not one (YYYY-MM-DD) is an error.
// No header at all is a client from before the header: stateful.
func servedStatelessly(version string) (bool, error) {
	if version == "" {
		return false, nil
	}
	v, err := time.Parse(time.DateOnly, version)
	if err != nil {
		return false, fmt.Errorf("the Mcp-Protocol-Version header %q is not an MCP revision: want its date, YYYY-MM-DD (such as %s)", version, statelessProtocol)
	}
	first, err := time.Parse(time.DateOnly, statelessProtocol)
	if err != nil {
		return false, err
	}
	return !v.Before(first), nil
}

// unsupportedVersion answers a request whose Mcp-Protocol-Version is not a
// revision as SEP-2575 asks of a version the server does not implement:
// 400 with a JSON-RPC UnsupportedProtocolVersionError (-32022) carrying
// the request's id (none when the body is not one request), the versions
// the server serves and the one asked for; its message says why (want
// YYYY-MM-DD).
func unsupportedVersion(w http.ResponseWriter, r *http.Request, why error, log *slog.Logger) {
	var id jsonrpc.ID
	if body, err := io.ReadAll(io.LimitReader(r.Body, maxVersionProbeBody)); err == nil {
		if msg, err := jsonrpc.DecodeMessage(body); err == nil {
			if req, ok := msg.(*jsonrpc.Request); ok {
				id = req.ID
			}
		}
	}
	out, err := unsupportedVersionBody(id, r.Header.Get("Mcp-Protocol-Version"), why)
	if err != nil {
		http.Error(w, why.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	if _, err := w.Write(out); err != nil {
		log.Debug("answering an unsupported protocol version", "err", err)
	}
}

// unsupportedVersionBody is the JSON-RPC response unsupportedVersion sends.
func unsupportedVersionBody(id jsonrpc.ID, requested string, why error) ([]byte, error) {
	data, err := json.Marshal(mcp.UnsupportedProtocolVersionData{Supported: mcp.SupportedProtocolVersions(), Requested: requested})
	if err != nil {
		return nil, err
	}
	return jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id,
		Error: &jsonrpc.Error{Code: mcp.CodeUnsupportedProtocolVersion, Message: why.Error(), Data: data}})
}

// maxVersionProbeBody bounds what unsupportedVersion reads of a refused
// request to find its id.
const maxVersionProbeBody = 1 << 20

// requireBearer lets a request through only with the token.
func requireBearer(next http.Handler, token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		switch {
		case !ok || got == "":
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcp-patch"`)
			http.Error(w, "bearer token missing: send Authorization: Bearer <token>", http.StatusUnauthorized)
		case subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(token)) != 1:
			w.Header().Set("WWW-Authenticate", `Bearer realm="mcp-patch", error="invalid_token"`)
			http.Error(w, "bearer token invalid", http.StatusUnauthorized)
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// checkOrigin refuses a browser request whose Origin is not a loopback
// origin when the request reached the server on loopback, the same rule
// the SDK applies to Host.
func checkOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" {
			local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
			u, err := url.Parse(o)
			if local != nil && isLoopbackAddr(local) && (err != nil || !isLoopback(u.Hostname())) {
				http.Error(w, "forbidden: origin "+o+" is not local", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func isLoopbackAddr(a net.Addr) bool {
	host, _, err := net.SplitHostPort(a.String())
	return err == nil && isLoopback(host)
}
