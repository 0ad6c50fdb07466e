package tools

import (
	"strings"
	"testing"
)

func TestPromptText(t *testing.T) {
	byName := map[string]prompt{}
	for _, p := range prompts {
		byName[p.name] = p
	}
	for _, tt := range []struct {
		prompt string
		args   map[string]string
		want   []string // in the text
		err    string
	}{
		{"plan_round", map[string]string{"round": "2026-12"}, []string{"round 2026-12.", `plan_round {"round":"2026-12"}`, "Start no window"}, ""},
		{"plan_round", nil, []string{"that is open", "plan_round:"}, ""},
		{"continue_round", map[string]string{"round": ""}, []string{"round_status:", "approval_required", "Never work around a stop"}, ""},
		{"continue_round", map[string]string{"round": "2026-12"}, []string{`round_status {"round":"2026-12"}`}, ""},
		{"record_findings", map[string]string{"round": "2026-12"}, []string{"record_lesson", "open_question"}, ""},
		{"plan_round", map[string]string{"round": "../etc"}, nil, "not a round id"},
		{"plan_round", map[string]string{"node": "h1"}, nil, `unknown argument "node"`},
	} {
		p, ok := byName[tt.prompt]
		if !ok {
			t.Fatalf("no prompt %s", tt.prompt)
		}
		got, err := promptText(p, tt.args)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("%s %v: err %v, want %q", tt.prompt, tt.args, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s %v: %v", tt.prompt, tt.args, err)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s %v: text lacks %q:\n%s", tt.prompt, tt.args, w, got)
			}
		}
	}
}
