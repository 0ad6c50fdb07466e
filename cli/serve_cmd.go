package cli

import "github.com/spf13/cobra"

// serveFlags are serve's own flags; each, when given, overrides the
// config file's serve section.
type serveFlags struct {
	httpAddr, tokenFile, tokenEnv, tlsCert, tlsKey, metricsAddr string
}

func (a *app) serveCommand() *cobra.Command {
	var f serveFlags
	c := &cobra.Command{
		Use:   "serve",
		Short: "Serve MCP over stdio (default) or streamable HTTP (--http 127.0.0.1:PORT)",
		Long: `Serve the tools over MCP: on stdio by default (the client starts the server),
or over streamable HTTP with --http. HTTP needs a bearer token on every request
(--token-file, or the environment variable named by --token-env); an address
that is not loopback also needs --tls-cert and --tls-key.`,
		Example: `  mcp-patch serve --config ~/.config/mcp-patch/config.yaml
  mcp-patch serve --http 127.0.0.1:8765 --token-file ~/.config/mcp-patch/token --config ~/.config/mcp-patch/config.yaml`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd.Context(), a.g, f, a.stdio)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.httpAddr, "http", "", "serve streamable HTTP on this host:port (loopback by default) instead of stdio")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token HTTP clients must send (mode 0600)")
	fl.StringVar(&f.tokenEnv, "token-env", "", "environment variable holding the bearer token (default MCP_PATCH_TOKEN)")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "TLS certificate (PEM) for HTTPS")
	fl.StringVar(&f.tlsKey, "tls-key", "", "TLS key (PEM) for HTTPS")
	fl.StringVar(&f.metricsAddr, "metrics-addr", "", "also serve Prometheus metrics on this address at /metrics, without a token (for stdio; with --http they are on its /metrics, behind the token)")
	return c
}
