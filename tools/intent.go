package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcp-patch/mcp-patch/intent"
)

// intentError turns the intent package's errors into refusals (bad input,
// nothing changed) or failures.
func intentError(action string, err error) error {
	switch {
	case errors.Is(err, intent.ErrInvalid), errors.Is(err, intent.ErrUnknownComponent),
		errors.Is(err, intent.ErrUnknownDocument), errors.Is(err, intent.ErrUnknownProperty), errors.Is(err, intent.ErrMalformed):
		return Refuse("Fix the input: read_intent lists the components, their documents and property ids.",
			action+": "+err.Error(), "nothing was changed")
	case errors.Is(err, intent.ErrDirty):
		return Refuse("Ask a person to commit or discard their edits to those files in the intent repository, then call again.",
			action+": "+err.Error(), "nothing was changed")
	case errors.Is(err, intent.ErrProtectedBranch):
		return Refuse("Configure a working branch that is not protected (git.branch).", action+": "+err.Error(), "nothing was changed")
	case errors.Is(err, intent.ErrVerifyDisabled):
		return Refuse("Run verify.sh on a server that is not read-only, or have the operator set verify.in_read_only.", action+": "+err.Error(), "nothing was run")
	case errors.Is(err, intent.ErrBusy):
		return Refuse("Call again in a few seconds.", action+": "+err.Error(), "nothing was changed")
	case errors.Is(err, intent.ErrNotRepo):
		return Refuse("Point --intent-repo (MCP_PATCH_INTENT_REPO) at the intent repository's working copy.", action+": "+err.Error())
	}
	return fmt.Errorf("%s: %w", action, err)
}

func (d *Deps) intentRepo(round string) (*intent.Repo, error) {
	if d.Intent == nil {
		return nil, Refuse("Start the server with --intent-repo PATH (or MCP_PATCH_INTENT_REPO).", "no intent repository is configured")
	}
	r, err := d.Intent(round)
	if err != nil {
		return nil, intentError("open the intent repository", err)
	}
	return r, nil
}

// ---- read_intent ----

// ReadIntentIn selects what to read.
type ReadIntentIn struct {
	Component string `json:"component,omitempty" jsonschema:"a component name; omit to list every component"`
}

// ReadIntentOut is the component list, or one component in full.
type ReadIntentOut struct {
	Result
	Components []intent.ComponentSummary `json:"components,omitempty" jsonschema:"every component, when no component was named"`
	Component  *intent.Component         `json:"component,omitempty" jsonschema:"the named component: documents, parsed intent sections, settings, lessons"`
}

// ReadIntent is the read_intent tool.
func ReadIntent() Tool {
	return New[ReadIntentIn, ReadIntentOut](Spec{
		Name:  "read_intent",
		Title: "Read intent documents",
		Description: "List the platform components of the intent repository, or return one component's documents " +
			"(intent.md, runbook.md, changelog.md, verify.sh, lessons.md, settings.yaml) with intent.md parsed into " +
			"its sections: why it exists, properties it must keep (with ids such as P3), out of scope, open questions. " +
			"Read these before planning: the properties are what the round must keep true.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: false,
	}, func(ctx context.Context, d *Deps, in ReadIntentIn, p Progress) (ReadIntentOut, error) {
		r, err := d.intentRepo("")
		if err != nil {
			return ReadIntentOut{}, err
		}
		if in.Component == "" {
			cs, err := r.Components()
			if err != nil {
				return ReadIntentOut{}, intentError("list components", err)
			}
			return ReadIntentOut{Components: cs, Result: Result{
				Reasons:    []string{fmt.Sprintf("%d components", len(cs))},
				NextAction: "Read each component that the round touches (read_intent with component), starting with os-layer.",
			}}, nil
		}
		c, err := r.Component(in.Component)
		if err != nil {
			return ReadIntentOut{}, intentError("read component "+in.Component, err)
		}
		res := Result{NextAction: "Keep its properties in mind; when the live system contradicts one, record_lesson kind=open_question naming the property."}
		if len(c.Problems) > 0 {
			res.Reasons = append(res.Reasons, c.Problems...)
		}
		return ReadIntentOut{Component: c, Result: res}, nil
	})
}

// ---- record_lesson ----

// RecordLessonIn is one lesson or open question.
type RecordLessonIn struct {
	Component string `json:"component" jsonschema:"the component the lesson is about"`
	Kind      string `json:"kind" jsonschema:"lesson: appended to lessons.md; open_question: appended to intent.md's open questions, naming a property (how the live system contradicting the intent is flagged)"`
	Property  string `json:"property,omitempty" jsonschema:"the property id it concerns, e.g. P1; required for an open question"`
	Text      string `json:"text" jsonschema:"what was learned or what is in question, plain words, at most 16 KiB"`
	Round     string `json:"round,omitempty" jsonschema:"the round id; default the current round, else this month (YYYY-MM)"`
}

// RecordLessonOut is the commit made.
type RecordLessonOut struct {
	Result
	Commit *intent.Commit `json:"commit,omitempty"`
}

// RecordLesson is the record_lesson tool.
func RecordLesson() Tool {
	return New[RecordLessonIn, RecordLessonOut](Spec{
		Name:  "record_lesson",
		Title: "Record a lesson or open question",
		Description: "Append a dated lesson to a component's lessons.md, or an open question against a named property " +
			"of its intent.md, and commit only that file to the round's working branch of the intent repository " +
			"(never the protected main; people review and merge). Use open_question when the live system contradicts " +
			"the intent: flag it, never work around it.",
		Kind: Write, Idempotent: false, OpenWorld: false,
	}, func(ctx context.Context, d *Deps, in RecordLessonIn, p Progress) (RecordLessonOut, error) {
		var kind intent.LessonKind
		switch in.Kind {
		case "lesson":
			kind = intent.KindLesson
		case "open_question":
			kind = intent.KindOpenQuestion
		default:
			return RecordLessonOut{}, Refuse("Use kind lesson or open_question.", fmt.Sprintf("kind %q is not lesson or open_question", in.Kind), "nothing was changed")
		}
		round := in.Round
		if round == "" {
			round = d.currentRoundID()
		}
		r, err := d.intentRepo(round)
		if err != nil {
			return RecordLessonOut{}, err
		}
		c, err := r.RecordLesson(ctx, intent.LessonInput{Kind: kind, Component: in.Component, Property: in.Property, Text: in.Text, RoundID: round})
		if err != nil {
			return RecordLessonOut{}, intentError("record "+in.Kind, err)
		}
		res := Result{Reasons: []string{fmt.Sprintf("committed %s on branch %s (%s)", short(c.Hash), c.Branch, strings.Join(c.Files, ", "))},
			NextAction: "Continue the round; people review the working branch and merge it."}
		if c.PushError != "" {
			res.Reasons = append(res.Reasons, "push failed (the commit stands): "+c.PushError)
		}
		return RecordLessonOut{Commit: &c, Result: res}, nil
	})
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// currentRoundID is the open round, else this month.
func (d *Deps) currentRoundID() string {
	if d.CurrentRound != nil {
		if id := d.CurrentRound(); id != "" {
			return id
		}
	}
	return d.now().UTC().Format("2006-01")
}

// ---- run_verify ----

// RunVerifyIn names the component.
type RunVerifyIn struct {
	Component      string `json:"component" jsonschema:"the component whose verify.sh to run"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"bound on the run, 1 to 600; default 60"`
}

// RunVerifyOut is the script's outcome.
type RunVerifyOut struct {
	Result
	Verify *intent.VerifyResult `json:"verify,omitempty"`
}

// RunVerify is the run_verify tool.
func RunVerify() Tool {
	return New[RunVerifyIn, RunVerifyOut](Spec{
		Name:  "run_verify",
		Title: "Run a component's verify.sh",
		Description: "Run a component's verify.sh from the intent repository with a bounded time and report its exit " +
			"code and output. Exit 0 means the component's properties hold as far as the script can tell.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: true,
	}, func(ctx context.Context, d *Deps, in RunVerifyIn, p Progress) (RunVerifyOut, error) {
		timeout := 60 * time.Second
		if in.TimeoutSeconds != 0 {
			if in.TimeoutSeconds < 1 || in.TimeoutSeconds > 600 {
				return RunVerifyOut{}, Refuse("Use a timeout between 1 and 600 seconds.", fmt.Sprintf("timeout_seconds %d is out of range", in.TimeoutSeconds))
			}
			timeout = time.Duration(in.TimeoutSeconds) * time.Second
		}
		r, err := d.intentRepo("")
		if err != nil {
			return RunVerifyOut{}, err
		}
		v, err := r.RunVerify(ctx, in.Component, timeout, d.VerifyEnv)
		if err != nil {
			return RunVerifyOut{}, intentError("run verify.sh of "+in.Component, err)
		}
		out := RunVerifyOut{Verify: &v}
		if !v.Passed {
			why := fmt.Sprintf("verify.sh of %s exited %d", in.Component, v.ExitCode)
			if v.TimedOut {
				why = fmt.Sprintf("verify.sh of %s ran past %s and was killed", in.Component, timeout)
			}
			out.Result = Result{Status: StatusFailed, Reasons: []string{why},
				NextAction: "Read the output; if the component is unhealthy, stop and tell a person before any destructive step."}
			return out, nil
		}
		out.Reasons = []string{fmt.Sprintf("verify.sh of %s passed in %d ms", in.Component, v.DurationMS)}
		return out, nil
	})
}

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
