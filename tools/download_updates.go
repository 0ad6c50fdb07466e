package tools

import (
	"context"
	"errors"
	"fmt"

	"github.com/mcp-patch/mcp-patch/host/steps"
	"github.com/mcp-patch/mcp-patch/round"
	"github.com/mcp-patch/mcp-patch/round/service"
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
		Description: "`apt-get -d full-upgrade`: fetch the node's packages into apt's cache while workloads run, so the window is " +
			"short. Installs nothing. Without an open round it only pre-fetches and records nothing.",
		Kind: Write, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in NodeIn, p Progress) (DownloadOut, error) {
		if err := ValidNode(in.Node); err != nil {
			return DownloadOut{}, err
		}
		// Without an open round this is the pre-download a person runs on
		// one host before a window: it fills apt's cache and nothing else,
		// and there is no round to record it in.
		s := d.MaybeRound(true)
		h, err := d.OpenHosts(ctx)
		if err != nil {
			return DownloadOut{}, err
		}
		if s != nil {
			if err := s.Begin(round.StepDownload, in.Node); err != nil {
				return DownloadOut{}, err
			}
		}
		dl, err := h.Steps.Download(ctx, in.Node)
		if err != nil {
			herr := service.HostError(in.Node, "download updates", err)
			addLockFacts(herr, dl)
			if s == nil {
				return DownloadOut{Download: &dl}, withReasons(herr, "no round is open: nothing was recorded")
			}
			return DownloadOut{Download: &dl}, errors.Join(herr, s.Fail(round.StepDownload, in.Node, err.Error()))
		}
		reasons := []string{downloadSummary(dl)}
		if s == nil {
			reasons = append(reasons, "no round is open: apt's cache on the node was filled, nothing was installed and nothing was recorded")
			return DownloadOut{Download: &dl, Result: Result{Reasons: reasons,
				NextAction: "The packages wait in apt's cache on the node; the window's install_updates uses them."}}, nil
		}
		if err := s.Finish(round.StepDownload, in.Node, "", ""); err != nil {
			return DownloadOut{}, err
		}
		return DownloadOut{Download: &dl, Result: Result{Reasons: reasons, NextAction: "snapshot_node on this node next.", NextCall: CallTo("snapshot_node", "node", in.Node)}}, nil
	})
}

// downloadSummary is what a download fetched, in one line.
func downloadSummary(dl steps.DownloadResult) string {
	s := fmt.Sprintf("%d package(s) fetched into apt's cache", len(dl.Fetched))
	if dl.Lock != nil {
		s += fmt.Sprintf(" after waiting for dpkg's lock (held by %s)", dl.Lock.Holder())
	}
	return s
}

// addLockFacts adds what the download saw of dpkg's lock to a failure's
// reasons: who held it and how long the step waited.
func addLockFacts(err error, dl steps.DownloadResult) {
	if dl.Lock == nil {
		return
	}
	withReasons(err, fmt.Sprintf("dpkg's lock was held by %s; the step waited %d s for it and left it alone", dl.Lock.Holder(), dl.Lock.WaitedSeconds))
}

// withReasons appends reasons to a refusal or failure and returns it.
func withReasons(err error, reasons ...string) error {
	var ref *Refusal
	var fail *Failure
	switch {
	case errors.As(err, &ref):
		ref.Reasons = append(ref.Reasons, reasons...)
	case errors.As(err, &fail):
		fail.Reasons = append(fail.Reasons, reasons...)
	}
	return err
}
