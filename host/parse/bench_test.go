package parse

import "testing"

func BenchmarkParseGrubCfg(b *testing.B) {
	cfg := fixture(b, "grub/grub.cfg_ubuntu2204-aws-2kernels-partuuid-initrdless.cfg")
	b.SetBytes(int64(len(cfg)))
	for b.Loop() {
		_ = ParseGrubCfg(cfg)
	}
}

func BenchmarkPlanDigest(b *testing.B) {
	out := fixture(b, "apt/apt-get-s-upgrade_ubuntu1204-security_monitoring-plugins-ubuntu2.txt")
	b.SetBytes(int64(len(out)))
	for b.Loop() {
		_ = PlanDigest(out)
	}
}

func BenchmarkParseNvidiaSMIXML8GPU(b *testing.B) {
	x := []byte(fixture(b, "nvidia/nvidia-smi-q-x_8x-tesla-v100s-pcie_v11-dtd_460.73.01.xml"))
	b.SetBytes(int64(len(x)))
	for b.Loop() {
		if _, err := ParseNvidiaSMIXML(x); err != nil {
			b.Fatal(err)
		}
	}
}
