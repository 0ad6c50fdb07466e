package tools

import (
	"context"
	"errors"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
)

// DownloadOut is what was fetched.
type DownloadOut struct {
	Result
	Download *steps.DownloadResult `json:"download,omitempty"`
}

// DownloadUpdates is the download_updates tool.
func DownloadUpdates() Tool {
	return New[NodeIn, DownloadOut](Spec{
		Name:  "download_updates",
		Title: "Download the updates",
		Description: "`apt-get -d full-upgrade`: fetch the node's packages while workloads run, so the window is short. Installs " +
			"nothing.",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in NodeIn, p Progress) (DownloadOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return DownloadOut{}, err
		}
		s, err := d.openSession()
		if err != nil {
			return DownloadOut{}, err
		}
		h, err := d.hosts(ctx)
		if err != nil {
			return DownloadOut{}, err
		}
		if err := s.begin(round.StepDownload, in.Node); err != nil {
			return DownloadOut{}, err
		}
		dl, err := h.Steps.Download(ctx, in.Node)
		if err != nil {
			return DownloadOut{Download: &dl}, errors.Join(hostError(in.Node, "download updates", err), s.fail(round.StepDownload, in.Node, err.Error()))
		}
		if err := s.finish(round.StepDownload, in.Node, "", ""); err != nil {
			return DownloadOut{}, err
		}
		return DownloadOut{Download: &dl, Result: Result{NextAction: "snapshot_node on this node next.", NextCall: CallTo("snapshot_node", "node", in.Node)}}, nil
	})
}
