package parse

import (
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseLivepatchStatus(t *testing.T) {
	var landscape struct {
		Info struct {
			JSON struct {
				Output json.RawMessage `json:"output"`
			} `json:"json"`
		} `json:"livepatch_info"`
	}
	if err := json.Unmarshal([]byte(fixture(t, "livepatch/landscape-api-livepatch-info_embeds-livepatch-status-json-client-10.8.3.json")), &landscape); err != nil {
		t.Fatal(err)
	}
	applied, err := ParseLivepatchStatus(fixture(t, "livepatch/canonical-livepatch-status-format-yaml_applied-with-fixes_focal-azure.yaml"), "yaml")
	if err != nil {
		t.Fatal(err)
	}
	if applied.PatchState != "applied" || applied.Version != "75.2" || len(applied.Fixes) != 34 || applied.Fixes[0] != "CVE-2013-1798" {
		t.Errorf("yaml applied: %+v", applied)
	}
	tests := []struct {
		name, text, format string
		want               Livepatch
	}{
		{
			name: "yaml nothing to apply", format: "yaml",
			text: fixture(t, "livepatch/canonical-livepatch-status-format-yaml_nothing-to-apply_focal-azure.yaml"),
			want: Livepatch{ClientVersion: "9.5.5", Kernel: "5.4.0-1043.45-azure", CheckState: "checked", PatchState: "nothing-to-apply", Fixes: []string{}},
		},
		{
			name: "json from client 10.8.3", format: "json", text: string(landscape.Info.JSON.Output),
			want: Livepatch{ClientVersion: "10.8.3", Kernel: "5.15.0-100.110-generic", CheckState: "checked", PatchState: "applied",
				Version: "104.1", Supported: "supported", Fixes: []string{"cve-2023-6270", "cve-2024-1086", "cve-2024-26581", "cve-2024-26597"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseLivepatchStatus(tc.text, tc.format)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got)\n%s", d)
			}
		})
	}
	if _, err := ParseLivepatchStatus(fixture(t, "livepatch/canonical-livepatch-status_plain_applied_focal-azure.txt"), "yaml"); err == nil {
		t.Error("plain status parsed as yaml status")
	}
}

func TestAptConfigBlacklist(t *testing.T) {
	dump := "Unattended-Upgrade \"\";\nUnattended-Upgrade::Package-Blacklist \"\";\nUnattended-Upgrade::Package-Blacklist:: \"linux-\";\nUnattended-Upgrade::Package-Blacklist:: \"nvidia-\";\n"
	if d := cmp.Diff([]string{"linux-", "nvidia-"}, ParseAptConfigBlacklist(dump)); d != "" {
		t.Errorf("(-want +got)\n%s", d)
	}
}

func TestRebootRequiredPkgs(t *testing.T) {
	if d := cmp.Diff([]string{"linux-image-4.4.0-98-generic", "linux-base"},
		ParseRebootRequiredPkgs(fixture(t, "livepatch/reboot-required.pkgs_ubuntu1604_kernel-dup-linux-base_UNATTRIBUTED.txt"))); d != "" {
		t.Errorf("(-want +got)\n%s", d)
	}
}

func FuzzParseMisc(f *testing.F) {
	for _, p := range fixtureFiles(f, "livepatch", "") {
		f.Add(fixture(f, p[len("testdata/fixtures/"):]))
	}
	f.Fuzz(func(t *testing.T, text string) {
		_, _ = ParseLivepatchStatus(text, "yaml")
		_, _ = ParseLivepatchStatus(text, "json")
		for _, e := range ParseAptConfigBlacklist(text) {
			if e == "" {
				t.Fatal("empty blacklist entry")
			}
		}
		seen := map[string]bool{}
		for _, p := range ParseRebootRequiredPkgs(text) {
			if seen[p] {
				t.Fatalf("duplicate %q", p)
			}
			seen[p] = true
		}
		_ = ClassifyPackage(text)
		_, _ = KernelFromImagePackage(text)
	})
}
