package parse

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseNvidiaSMIXMLFixtures(t *testing.T) {
	type summary struct {
		Driver, CUDA string
		Attached     int
		GPUs         int
		First        GPU
	}
	tests := []struct {
		name string
		file string
		want summary
	}{
		{
			name: "8x V100S, v11 DTD, double_bit ECC counters",
			file: "nvidia/nvidia-smi-q-x_8x-tesla-v100s-pcie_v11-dtd_460.73.01.xml",
			want: summary{Driver: "460.73.01", CUDA: "11.2", Attached: 8, GPUs: 8},
		},
		{
			name: "A100 MIG, v12, attached 4 but one gpu element",
			file: "nvidia/nvidia-smi-q-x_telegraf_a100-sxm4-80gb-mig_v12.xml",
			want: summary{Driver: "535.54.03", CUDA: "12.2", Attached: 4, GPUs: 1, First: GPU{
				PCIBusID: "00000000:01:00.0", UUID: "GPU-513536b6-7d19-9063-b049-1e69664bb298", Name: "NVIDIA A100-SXM4-80GB",
				Serial: "1650522003820", MinorNumber: "1", MIGMode: "Enabled", ECCMode: "Enabled",
				RetiredPagesPending: "N/A", FabricState: "N/A", FabricStatus: "N/A", Problems: []string{},
			}},
		},
		{
			name: "RTX 3080, v13",
			file: "nvidia/nvidia-smi-q-x_telegraf_rtx-3080_v13.xml",
			want: summary{Driver: "595.58.03", CUDA: "13.2", Attached: 1, GPUs: 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := ParseNvidiaSMIXML([]byte(fixture(t, tc.file)))
			if err != nil {
				t.Fatal(err)
			}
			got := summary{Driver: s.DriverVersion, CUDA: s.CUDAVersion, Attached: s.AttachedGPUs, GPUs: len(s.GPUs)}
			if tc.want.First.UUID != "" {
				got.First = s.GPUs[0]
				got.First.VolatileUncorrectable, got.First.AggregateUncorrectable = 0, 0
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got)\n%s", d)
			}
			for _, g := range s.GPUs {
				if g.UUID == "" || g.PCIBusID == "" || len(g.Problems) != 0 {
					t.Errorf("gpu %+v", g)
				}
			}
		})
	}
}

func TestNvidiaHealthHints(t *testing.T) {
	xml := `<?xml version="1.0" ?><!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log><driver_version>535.161.08</driver_version><attached_gpus>1</attached_gpus>
<gpu id="00000000:18:00.0"><product_name>NVIDIA H100 80GB HBM3</product_name><uuid>GPU-1</uuid>
<ecc_errors><volatile><sram_uncorrectable>0</sram_uncorrectable><dram_uncorrectable>2</dram_uncorrectable></volatile>
<aggregate><dram_uncorrectable>5</dram_uncorrectable></aggregate></ecc_errors>
<retired_pages><pending_retirement>Yes</pending_retirement></retired_pages>
<remapped_rows><remapped_row_corr>0</remapped_row_corr><remapped_row_pending>Yes</remapped_row_pending><remapped_row_failure>No</remapped_row_failure></remapped_rows>
<fabric><state>In Progress</state><status>N/A</status></fabric></gpu></nvidia_smi_log>`
	s, err := ParseNvidiaSMIXML([]byte(xml))
	if err != nil {
		t.Fatal(err)
	}
	g := s.GPUs[0]
	want := []string{"2 volatile uncorrectable ECC errors", "page retirement pending (needs a GPU reset)",
		"row remapping pending (needs a GPU reset)", "fabric state In Progress"}
	if d := cmp.Diff(want, g.Problems); d != "" {
		t.Errorf("(-want +got)\n%s", d)
	}
	if g.AggregateUncorrectable != 5 || g.PCIBusID != "00000000:18:00.0" {
		t.Errorf("got %+v", g)
	}
	if _, err := ParseNvidiaSMIXML([]byte("<nvidia_smi_log><gpu>")); err == nil {
		t.Error("truncated XML parsed")
	}
}

func TestParseNvidiaProcVersion(t *testing.T) {
	for in, want := range map[string]string{
		"NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.161.08  Tue Mar  5 22:42:59 UTC 2024\nGCC version:  gcc version 12.3.0\n": "535.161.08",
		"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  590.48.01  Release Build  (dvs-builder@U16-I3-B13-4-3)\n":            "590.48.01",
	} {
		got, err := ParseNvidiaProcVersion(in)
		if err != nil || got != want {
			t.Errorf("%q: %q %v", in, got, err)
		}
	}
	if _, err := ParseNvidiaProcVersion("nothing"); err == nil {
		t.Error("no error")
	}
}

func FuzzParseNvidiaSMIXML(f *testing.F) {
	// Whole captures are tens of kilobytes, too big for the mutator to make
	// progress; seed with the header and first GPU element of each, cut at
	// </ecc_errors> and closed again.
	for _, p := range fixtureFiles(f, "nvidia", "nvidia-smi-q-x_") {
		x := fixture(f, strings.TrimPrefix(p, "testdata/fixtures/"))
		if i := strings.Index(x, "</ecc_errors>"); i > 0 {
			x = x[:i] + "</ecc_errors></gpu></nvidia_smi_log>"
		}
		f.Add([]byte(x))
	}
	f.Add([]byte(`<nvidia_smi_log><gpu id="x"><ecc_errors><volatile><double_bit><total>9223372036854775807</total></double_bit><dram_uncorrectable>9223372036854775807</dram_uncorrectable></volatile></ecc_errors></gpu></nvidia_smi_log>`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseNvidiaSMIXML(data)
		if err != nil {
			return
		}
		for _, g := range s.GPUs {
			if g.VolatileUncorrectable < -1 || g.AggregateUncorrectable < -1 {
				t.Fatalf("negative count %+v", g)
			}
		}
		_, _ = ParseNvidiaProcVersion(string(data))
	})
}
