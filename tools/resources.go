package tools

import (
	"context"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/intent"
)

// IntentResources serves every intent document as an MCP resource
// (intent://<component>/<file>), read live from the repository. The
// repository is opened on the first resources/list or read, not at start:
// a server that is only asked for tools never opens it for resources.
func IntentResources(d *Deps) func(s *mcp.Server) {
	return func(s *mcp.Server) {
		if d.Intent == nil {
			return
		}
		var (
			mu     sync.Mutex
			repo   *intent.Repo
			listed bool
		)
		// open opens the repository once; a failure is tried again on the
		// next request.
		open := func() (*intent.Repo, error) {
			mu.Lock()
			defer mu.Unlock()
			if repo != nil {
				return repo, nil
			}
			r, err := d.Intent("")
			if err != nil {
				return nil, err
			}
			repo = r
			return r, nil
		}
		handler := func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			comp, name, err := intent.ParseURI(req.Params.URI)
			if err != nil {
				return nil, mcp.ResourceNotFoundError(req.Params.URI)
			}
			r, err := open()
			if err != nil {
				d.Log.Warn("intent repository not opened for a resource", "uri", req.Params.URI, "err", err)
				return nil, mcp.ResourceNotFoundError(req.Params.URI)
			}
			doc, err := r.Document(comp, name)
			if err != nil {
				return nil, mcp.ResourceNotFoundError(req.Params.URI)
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: doc.URI, MIMEType: doc.MIMEType, Text: doc.Text}}}, nil
		}
		// list adds each document as a resource, once it has been read.
		list := func() {
			r, err := open()
			if err != nil {
				d.Log.Warn("intent resources not listed", "err", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if listed {
				return
			}
			docs, err := r.Documents()
			if err != nil {
				d.Log.Warn("intent resources not listed", "err", err)
				return
			}
			for _, doc := range docs {
				s.AddResource(&mcp.Resource{URI: doc.URI, Name: doc.Component + "/" + doc.Name, MIMEType: doc.MIMEType, Size: doc.Size,
					Description: "intent document " + doc.Name + " of component " + doc.Component}, handler)
			}
			listed = true
		}
		s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: intent.URIScheme + "://{component}/{file}", Name: "intent document",
			Description: "a document of an intent component", MIMEType: "text/markdown"}, handler)
		s.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
			return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
				if method == "resources/list" {
					list()
				}
				return next(ctx, method, req)
			}
		})
	}
}
