package steps

import (
	"path/filepath"
	"testing"
)

// BenchmarkKernelStep is one fleet_check probe end to end on the local
// runner: script, sh, JSON decode.
func BenchmarkKernelStep(b *testing.B) {
	s := newSteps(b, Paths{}, "")
	ctx := ctxT(b)
	for b.Loop() {
		if _, err := s.Kernel(ctx, testNode); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInspectStep is a full inspect (including apt-get -s on the lab
// repository) on the local runner.
func BenchmarkInspectStep(b *testing.B) {
	r := newGrubRoot(b, "grub/grub.cfg_ubuntu2204-aws-2kernels-partuuid-initrdless.cfg")
	lab := newAptLab(b, "")
	s := newSteps(b, merge(r.paths(), lab.paths(), Paths{ProcMdstat: filepath.Join(r.dir, "none")}), "")
	ctx := ctxT(b)
	for b.Loop() {
		if _, err := s.Inspect(ctx, testNode, InspectInput{TargetKernel: "9.9.9-1-generic"}); err != nil {
			b.Fatal(err)
		}
	}
}
