package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/mcp-patch/mcp-patch/policy"
	"github.com/mcp-patch/mcp-patch/round/inbox"
)

func (a *app) approveCommand() *cobra.Command {
	var f approveFlags
	c := &cobra.Command{
		Use:   "approve [flags] REQUEST-FILE|-|INBOX-ID",
		Short: "Show an approval request in plain words and sign it with your SSH key",
		Long: `Show an approval request in plain words and sign it with your SSH key
(namespace mcp-patch): from ssh-agent (hardware keys included) or a key file.
The approval goes to stdout (or -o FILE), to hand back to the operator.

A request to sign a round's plan (sign_plan) or a whole window
(approve_window) is shown with the plan it binds, rendered by this binary
from the round's plan.json (--plan, or rounds/<round>/plan.json of the
intent repository), never from plan.md; a plan.json whose digest is not
the request's is not signed.

INBOX-ID signs a request waiting in the inbox (mcp-patch approvals lists
them, ROUND:NODE:STEP): the approval is left there, and the server that
asked uses it when the step is called again.`,
		Example: `  mcp-patch approve request.txt
  mcp-patch approve --key ~/.ssh/id_ed25519 -o approval.txt request.txt
  mcp-patch approve --plan rounds/2026-11/plan.json request.txt
  mcp-patch approve production-2026-12:gpu-3:drain_node`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("approve takes one request file (or - for stdin, or an inbox id), got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return exit(runApprove(cmd.Context(), a.g, a.stdio, f, args[0]))
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.keyFile, "key", "", "sign with this private key file instead of ssh-agent")
	fl.StringVar(&f.keyFP, "key-fingerprint", "", "with ssh-agent: the SHA256 fingerprint of the key to use (when it holds several)")
	fl.BoolVar(&f.yes, "yes", false, "do not ask for confirmation (you have read the request)")
	fl.StringVarP(&f.out, "output", "o", "", "write the approval to this file instead of stdout")
	fl.StringVar(&f.inbox, "inbox", "", "the inbox `directory` an INBOX-ID waits in (default: the config's approvals.inbox)")
	fl.StringVar(&f.plan, "plan", "", "the round's plan.json, shown with a sign_plan or approve_window request (default: rounds/<round>/plan.json in the intent repository)")
	return c
}

type approveFlags struct {
	keyFile, keyFP, out string
	// plan is the plan.json a plan or window request is shown from; ""
	// means the round's in the intent repository.
	plan string
	// inbox is the inbox an INBOX-ID is read from; "" means the config's.
	inbox string
	yes   bool
}

// runApprove is `mcp-patch approve FILE|-`: a person reads the request in
// plain words and signs it with their SSH key (ssh-agent, hardware keys
// included, or a key file). The approval goes to stdout, to hand back.
func runApprove(ctx context.Context, g *globals, stdio IO, f approveFlags, file string) int {
	keyFile, keyFP, yes, out := &f.keyFile, &f.keyFP, &f.yes, &f.out
	var text []byte
	var err error
	// An argument that is no file but an inbox id signs the request
	// waiting in the inbox.
	var entry *inbox.Entry
	var in inbox.Dir
	if file == "-" {
		text, err = io.ReadAll(io.LimitReader(stdio.Stdin, policy.MaxRequestBytes+1))
	} else if _, serr := os.Stat(file); errors.Is(serr, os.ErrNotExist) && inbox.ValidID(file) == nil {
		in = inbox.Dir(f.inbox)
		if in == "" {
			c, err := g.load(stdio.Getenv)
			if err != nil {
				fmt.Fprintln(stdio.Stderr, "mcp-patch approve:", err)
				return ExitUsage
			}
			in = inbox.Dir(c.InboxDir())
		}
		var e inbox.Entry
		if e, err = in.Get(file); err == nil {
			entry, text = &e, []byte(e.Request)
		}
	} else {
		text, err = os.ReadFile(file)
	}
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch approve: read request:", err)
		return ExitUsage
	}
	req, err := policy.ParseRequest(normalizeRequest(text))
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch approve: this is not a valid request; do not sign it:", err)
		return ExitNotOK
	}
	if entry != nil {
		if why := inboxMismatch(*entry, req); why != "" {
			fmt.Fprintln(stdio.Stderr, "mcp-patch approve: not signed: the inbox entry "+entry.ID+" "+why)
			return ExitNotOK
		}
		if entry.Environment != "" {
			fmt.Fprintf(stdio.Stderr, "Environment: %s (server %s), waiting since %s\n", entry.Environment, or(entry.Server, "unnamed"), entry.Since.UTC().Format(time.RFC3339))
		}
	}
	c, err := g.load(stdio.Getenv)
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch approve:", err)
		return ExitUsage
	}
	fmt.Fprint(stdio.Stderr, policy.Describe(req))
	if why := unsignable(req, time.Now(), c.Approvals.MaxLifetime.D()); why != "" {
		fmt.Fprintf(stdio.Stderr, "mcp-patch approve: not signed: %s. Ask the server for a fresh request.\n", why)
		return ExitNotOK
	}
	// What a person reads is what they sign: the plan the request binds,
	// from plan.json by this binary, not a file the agent could rewrite.
	shown, err := planShown(req, f.plan, c.IntentRepo)
	if err != nil {
		fmt.Fprintf(stdio.Stderr, "mcp-patch approve: not signed: %v\n", err)
		return ExitNotOK
	}
	fmt.Fprint(stdio.Stderr, shown)
	if !*yes {
		ok, err := confirm(stdio)
		if err != nil {
			fmt.Fprintln(stdio.Stderr, "mcp-patch approve:", err)
			return ExitUsage
		}
		if !ok {
			fmt.Fprintln(stdio.Stderr, "mcp-patch approve: not signed.")
			return ExitNotOK
		}
	}
	var res policy.SignResult
	if *keyFile != "" {
		res, err = policy.SignWithKeyFile(*keyFile, ttyPassphrase(stdio), req.Canonical())
	} else {
		sock := stdio.Getenv("SSH_AUTH_SOCK")
		if sock == "" {
			fmt.Fprintln(stdio.Stderr, "mcp-patch approve: no ssh-agent (SSH_AUTH_SOCK is empty); use --key FILE")
			return ExitUsage
		}
		res, err = policy.SignWithAgent(ctx, sock, *keyFP, req.Canonical())
	}
	if err != nil {
		fmt.Fprintln(stdio.Stderr, "mcp-patch approve: sign:", err)
		return ExitNotOK
	}
	approval := policy.FormatApproval(req, res.Signature)
	if entry != nil {
		if err := in.Sign(entry.ID, approval); err != nil {
			fmt.Fprintln(stdio.Stderr, "mcp-patch approve: leave the approval in the inbox:", err)
			return ExitNotOK
		}
		if *out != "" {
			if err := os.WriteFile(*out, []byte(approval), 0o600); err != nil {
				fmt.Fprintln(stdio.Stderr, "mcp-patch approve:", err)
				return ExitNotOK
			}
		}
		fmt.Fprintf(stdio.Stderr, "Signed with %s %s. The approval waits in the inbox; %s runs on %s when it is called again (the server verifies it first).\n",
			res.KeyType, res.Fingerprint, entry.Step, entry.Node)
		return ExitOK
	}
	if *out != "" {
		if err := os.WriteFile(*out, []byte(approval), 0o600); err != nil {
			fmt.Fprintln(stdio.Stderr, "mcp-patch approve:", err)
			return ExitNotOK
		}
	} else {
		fmt.Fprint(stdio.Stdout, approval)
	}
	fmt.Fprintf(stdio.Stderr, "Signed with %s %s. Hand the approval back to the operator.\n", res.KeyType, res.Fingerprint)
	return ExitOK
}

// inboxMismatch says why an inbox entry's request is not what the entry
// says it waits for ("" when it is): what a person reads in the listing
// is what they sign.
func inboxMismatch(e inbox.Entry, req policy.Request) string {
	switch {
	case req.Round != e.Round:
		return fmt.Sprintf("is listed for round %s, but its request is for round %s", e.Round, req.Round)
	case req.Tool != e.Step:
		return fmt.Sprintf("is listed for %s, but its request is for %s", e.Step, req.Tool)
	case req.Node != e.Node:
		return fmt.Sprintf("is listed for node %s, but its request is for %s", e.Node, req.Node)
	case e.Environment != "" && req.Environment != "" && req.Environment != e.Environment:
		return fmt.Sprintf("is listed for environment %s, but its request is for %s", e.Environment, req.Environment)
	}
	return ""
}

// unsignable says why a person must not sign req now: it would stay valid
// longer than maxLifetime, claims an issue time in the future, or has
// expired. "" means it may be signed.
func unsignable(req policy.Request, now time.Time, maxLifetime time.Duration) string {
	if err := policy.CheckLifetime(req, now, maxLifetime, 0); err != nil {
		var r *policy.RefusalError
		if errors.As(err, &r) {
			return fmt.Sprintf("the request is %s (%s)", strings.ReplaceAll(string(r.Reason), "_", " "), r.Detail)
		}
		return err.Error()
	}
	if !now.Before(req.Expires) {
		return fmt.Sprintf("the request expired at %s, %s ago", req.Expires.Format(time.RFC3339), policy.DurationWords(now.Sub(req.Expires)))
	}
	return ""
}

// normalizeRequest tolerates what copy and paste does to a request: CRLF
// line ends and a missing final newline. Anything else must be exact.
func normalizeRequest(b []byte) []byte {
	s := strings.ReplaceAll(string(b), "\r\n", "\n")
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	return []byte(s)
}

func confirm(stdio IO) (bool, error) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return false, fmt.Errorf("cannot ask for confirmation without a terminal (%v); read the request above and pass --yes", err)
	}
	defer tty.Close()
	fmt.Fprint(tty, "Sign this request? [y/N] ")
	line, _ := bufio.NewReader(tty).ReadString('\n')
	line = strings.TrimSpace(strings.ToLower(line))
	return line == "y" || line == "yes", nil
}

func ttyPassphrase(stdio IO) policy.PassphraseFunc {
	return func() ([]byte, error) {
		tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
		if err != nil {
			return nil, fmt.Errorf("the key is encrypted and there is no terminal to ask for its passphrase; load it into ssh-agent instead")
		}
		defer tty.Close()
		fmt.Fprint(tty, "Passphrase for the key: ")
		p, err := term.ReadPassword(int(tty.Fd()))
		fmt.Fprintln(tty)
		return p, err
	}
}
