package cli

import "testing"

func TestMemoryLimit(t *testing.T) {
	for _, tt := range []struct {
		mib        int
		gomemlimit string
		want       int64
		set        bool
	}{
		{mib: 16, want: 16 << 20, set: true},
		{mib: 1024, want: 1 << 30, set: true},
		{mib: 0},
		{mib: 16, gomemlimit: "200MiB"},
	} {
		got, set := memoryLimit(tt.mib, tt.gomemlimit)
		if got != tt.want || set != tt.set {
			t.Errorf("memoryLimit(%d, %q) = %d, %v; want %d, %v", tt.mib, tt.gomemlimit, got, set, tt.want, tt.set)
		}
	}
}
