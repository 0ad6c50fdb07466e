package tools

import (
	"context"
	"fmt"
	"strings"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/round/service"
)

// RecordLessonIn is one lesson or open question.
type RecordLessonIn struct {
	Component string `json:"component"`
	Kind      string `json:"kind"`
	Property  string `json:"property,omitempty" jsonschema:"the property id, e.g. P1; required for an open question"`
	Text      string `json:"text" jsonschema:"plain words"`
	Round     string `json:"round,omitempty" jsonschema:"default: the open round, else this month (YYYY-MM)"`
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
		Title: "Record a lesson or question",
		Description: "A dated lesson in a component's lessons.md, or an open question against a property of its intent.md, " +
			"committed on the round's branch. Flag a live system that contradicts the intent; never work around it.",
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
			round = d.CurrentRoundID()
		}
		r, err := d.IntentRepo(round)
		if err != nil {
			return RecordLessonOut{}, err
		}
		c, err := r.RecordLesson(ctx, intent.LessonInput{Kind: kind, Component: in.Component, Property: in.Property, Text: in.Text, RoundID: round})
		if err != nil {
			return RecordLessonOut{}, service.IntentError("record "+in.Kind, err)
		}
		res := Result{Reasons: []string{fmt.Sprintf("committed %s on branch %s (%s)", short(c.Hash), c.Branch, strings.Join(c.Files, ", "))},
			NextAction: "Continue the round; people review the working branch and merge it."}
		if c.PushError != "" {
			res.Reasons = append(res.Reasons, "push failed (the commit stands): "+c.PushError)
		}
		return RecordLessonOut{Commit: &c, Result: res}, nil
	})
}
