package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round/inbox"
)

func (a *app) approvalsCommand() *cobra.Command {
	var dirs []string
	var format string
	c := &cobra.Command{
		Use:   "approvals [flags]",
		Short: "What waits for a person's signature, across environments, and each environment's round",
		Long: `List every approval request waiting for a signature in the inbox
(approvals.inbox, default <state_dir>/inbox): the servers of every
environment that share the inbox leave each request there with its
environment, round, node, step and since when. Above them, each
environment's round as its server last left it: phase, the node in a
window or stopped, the next deadline on its compliance clock.

Sign one with mcp-patch approve ID: the approval stays in the inbox and
the server that asked uses it when the step is called again, after
verifying it like any other. Nothing here is trusted: a request is only
what you may sign, shown in plain words from its own text.`,
		Example: `  mcp-patch approvals
  mcp-patch approvals --inbox /var/lib/mcp-patch/inbox -o json
  mcp-patch approve production-2026-12:gpu-3:drain_node`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 0 {
				return usagef("approvals takes no arguments, got %q", args)
			}
			if format != "table" && format != "json" {
				return usagef("--output %q: use table or json", format)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return exit(a.runApprovals(dirs, format))
		},
	}
	c.Flags().StringArrayVar(&dirs, "inbox", nil, "an inbox `directory` to read (repeatable; default: the config's approvals.inbox)")
	c.Flags().StringVarP(&format, "output", "o", "table", "table or json")
	return c
}

// inboxView is what `mcp-patch approvals` shows.
type inboxView struct {
	Environments []inbox.Status `json:"environments"`
	Pending      []pendingView  `json:"pending"`
}

type pendingView struct {
	inbox.Entry
	// Signed says a signed approval waits for the server to use it.
	Signed bool `json:"signed"`
	// SignCommand is the command that signs it.
	SignCommand string `json:"sign_command"`
	Inbox       string `json:"inbox"`
}

func (a *app) runApprovals(dirs []string, format string) int {
	stdio := a.stdio
	if len(dirs) == 0 {
		c, err := a.g.load(stdio.Getenv)
		if err != nil {
			fmt.Fprintln(stdio.Stderr, "mcp-patch approvals:", err)
			return ExitUsage
		}
		dirs = []string{c.InboxDir()}
	}
	v, err := readInboxes(dirs, time.Now())
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch approvals:", err)
		return ExitNotOK
	}
	if format == "json" {
		enc := json.NewEncoder(stdio.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			fmt.Fprintln(stdio.Stderr, "mcp-patch approvals:", err)
			return ExitNotOK
		}
		return ExitOK
	}
	if err := writeInboxView(stdio.Stdout, v, time.Now()); err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch approvals:", err)
		return ExitNotOK
	}
	return ExitOK
}

// readInboxes reads the inboxes in dirs: every status and every request
// still valid at now, the oldest request first.
func readInboxes(dirs []string, now time.Time) (inboxView, error) {
	v := inboxView{Environments: []inbox.Status{}, Pending: []pendingView{}}
	for _, d := range dirs {
		in := inbox.Dir(d)
		ss, err := in.Statuses()
		if err != nil {
			return v, fmt.Errorf("inbox %s: %w", d, err)
		}
		v.Environments = append(v.Environments, ss...)
		es, err := in.List(now)
		if err != nil {
			return v, fmt.Errorf("inbox %s: %w", d, err)
		}
		for _, e := range es {
			cmd := "mcp-patch approve " + e.ID
			if len(dirs) > 1 {
				cmd = "mcp-patch approve --inbox " + d + " " + e.ID
			}
			v.Pending = append(v.Pending, pendingView{Entry: e, Signed: e.Signed, SignCommand: cmd, Inbox: d})
		}
	}
	slices.SortStableFunc(v.Pending, func(a, b pendingView) int { return a.Since.Compare(b.Since) })
	return v, nil
}

func writeInboxView(w io.Writer, v inboxView, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ENVIRONMENT\tROUND\tPHASE\tNODE\tDEADLINE\tREPORTED")
	if len(v.Environments) == 0 {
		fmt.Fprintln(tw, "(no server has left its round here yet)\t\t\t\t\t")
	}
	for _, s := range v.Environments {
		deadline := "-"
		if !s.Deadline.IsZero() {
			deadline = s.Deadline.UTC().Format("2006-01-02 15:04 UTC")
			if left := s.Deadline.Sub(now); left > 0 {
				deadline += " (in " + policy.DurationWords(left) + ")"
			} else {
				deadline += " (passed)"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s ago\n", or(s.Environment, "-"), or(s.Round, "-"), s.Phase, or(s.Node, "-"), deadline,
			policy.DurationWords(now.Sub(s.Updated)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if len(v.Pending) == 0 {
		_, err := fmt.Fprintln(w, "Nothing waits for a signature.")
		return err
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ENVIRONMENT\tROUND\tNODE\tSTEP\tWAITING\tEXPIRES\tSIGN")
	for _, p := range v.Pending {
		sign := p.SignCommand
		if p.Signed {
			sign = "signed; the server uses it at the step's next call"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", or(p.Environment, "-"), p.Round, p.Node, p.Step,
			policy.DurationWords(now.Sub(p.Since).Round(time.Minute)), "in "+policy.DurationWords(p.Expires.Sub(now).Round(time.Minute)), sign)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range v.Pending {
		fmt.Fprintf(w, "\n%s asks:\n  %s\n", p.ID, strings.Join(p.Summary, "\n  "))
	}
	return nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
