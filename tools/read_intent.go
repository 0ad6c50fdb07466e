package tools

import (
	"context"
	"fmt"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// ReadIntentIn selects what to read.
type ReadIntentIn struct {
	Component string `json:"component,omitempty" jsonschema:"omit to list every component"`
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
		Description: "The intent repository's components, or one component's documents with intent.md parsed (why, properties such" +
			" as P3, out of scope, open questions). The round must keep the properties.",
		Kind: ReadOnly, Idempotent: true, OpenWorld: false,
	}, func(ctx context.Context, d *Deps, in ReadIntentIn, p Progress) (ReadIntentOut, error) {
		r, err := d.IntentRepo("")
		if err != nil {
			return ReadIntentOut{}, err
		}
		if in.Component == "" {
			cs, err := r.Components()
			if err != nil {
				return ReadIntentOut{}, service.IntentError("list components", err)
			}
			return ReadIntentOut{Components: cs, Result: Result{
				Reasons:    []string{fmt.Sprintf("%d components", len(cs))},
				NextAction: "Read each component that the round touches (read_intent with component), starting with os-layer.",
			}}, nil
		}
		c, err := r.Component(in.Component)
		if err != nil {
			return ReadIntentOut{}, service.IntentError("read component "+in.Component, err)
		}
		// Lessons written in another environment's rounds (staging's, read
		// in production) say so.
		res := Result{NextAction: "Keep its properties in mind; when the live system contradicts one, record_lesson kind=open_question naming the property."}
		if envs, err := intent.LoadEnvironments(r.Root()); err != nil {
			res.Reasons = append(res.Reasons, "the lessons' environments are unknown: "+err.Error())
		} else {
			envs.MarkEnvironments(c)
		}
		if len(c.Problems) > 0 {
			res.Reasons = append(res.Reasons, c.Problems...)
		}
		return ReadIntentOut{Component: c, Result: res}, nil
	})
}
