package tools

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/intent"
)

// IntentResources registers every intent document as an MCP resource
// (intent://<component>/<file>), read live from the repository.
func IntentResources(d *Deps) func(s *mcp.Server) {
	return func(s *mcp.Server) {
		if d.Intent == nil {
			return
		}
		r, err := d.Intent("")
		if err != nil {
			d.Log.Warn("intent resources not registered", "err", err)
			return
		}
		docs, err := r.Documents()
		if err != nil {
			d.Log.Warn("intent resources not registered", "err", err)
			return
		}
		handler := func(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			comp, name, err := intent.ParseURI(req.Params.URI)
			if err != nil {
				return nil, mcp.ResourceNotFoundError(req.Params.URI)
			}
			doc, err := r.Document(comp, name)
			if err != nil {
				return nil, mcp.ResourceNotFoundError(req.Params.URI)
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: doc.URI, MIMEType: doc.MIMEType, Text: doc.Text}}}, nil
		}
		for _, doc := range docs {
			s.AddResource(&mcp.Resource{URI: doc.URI, Name: doc.Component + "/" + doc.Name, MIMEType: doc.MIMEType, Size: doc.Size,
				Description: "intent document " + doc.Name + " of component " + doc.Component}, handler)
		}
		s.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: intent.URIScheme + "://{component}/{file}", Name: "intent document",
			Description: "a document of an intent component", MIMEType: "text/markdown"}, handler)
	}
}
