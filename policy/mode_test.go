package policy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestModeAllows(t *testing.T) {
	classes := []ToolClass{ClassReadOnly, ClassWrite, ClassDestructive, ToolClass("bogus")}
	tests := []struct {
		mode Mode
		want []bool // per class above
	}{
		{ModeNormal, []bool{true, true, true, false}},
		{ModeDisableDestructive, []bool{true, true, false, false}},
		{ModeReadOnly, []bool{true, false, false, false}},
		{Mode(""), []bool{false, false, false, false}},
		{Mode("yolo"), []bool{false, false, false, false}},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			var got []bool
			for _, c := range classes {
				got = append(got, tt.mode.Allows(c))
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Allows (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	for _, s := range []string{"normal", "read-only", "disable-destructive"} {
		if m, err := ParseMode(s); err != nil || string(m) != s {
			t.Errorf("ParseMode(%q) = %q, %v", s, m, err)
		}
	}
	for _, s := range []string{"", "Normal", "readonly", "off"} {
		if _, err := ParseMode(s); err == nil {
			t.Errorf("ParseMode(%q) succeeded", s)
		}
	}
}

func TestToolClasses(t *testing.T) {
	tests := []struct {
		tool     string
		class    ToolClass
		known    bool
		approval bool
	}{
		{"drain_node", ClassDestructive, true, true},
		{"install_updates", ClassDestructive, true, true},
		{"trial_boot", ClassDestructive, true, true},
		{"promote_kernel", ClassDestructive, true, true},
		{"autoremove", ClassDestructive, true, true},
		{"fallback_drill", ClassDestructive, true, true},
		{"rollback_node", ClassDestructive, true, true},
		{"uncordon_node", ClassWrite, true, false},
		{"record_lesson", ClassWrite, true, false},
		{"plan_round", ClassReadOnly, true, false},
		{"round_status", ClassReadOnly, true, false},
		{"rm_rf", "", false, true}, // unknown tools need an approval
	}
	for _, tt := range tests {
		c, ok := ClassOf(tt.tool)
		if c != tt.class || ok != tt.known || RequiresApproval(tt.tool) != tt.approval {
			t.Errorf("%s: class %q known %v approval %v; want %q %v %v", tt.tool, c, ok, RequiresApproval(tt.tool), tt.class, tt.known, tt.approval)
		}
	}
}
