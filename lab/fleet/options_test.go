package fleet

import (
	"strings"
	"testing"
	"time"
)

func TestOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		opts Options
		want string // substring of the error; "" for none
	}{
		{"ok", Options{Dir: "/tmp/x", GPUServers: 1}, ""},
		{"no dir", Options{GPUServers: 1}, "Dir is required"},
		{"no hosts", Options{Dir: "/tmp/x"}, "no hosts"},
		{"negative count", Options{Dir: "/tmp/x", GPUServers: 1, Canary: -1}, "negative"},
		{"negative duration", Options{Dir: "/tmp/x", GPUServers: 1, RebootDowntime: -time.Second}, "durations"},
		{"gpu model", Options{Dir: "/tmp/x", GPUServers: 1, GPUModel: "A100"}, "GPUModel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.opts.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}

// TestFaultsByName: every listed fault can be built by name, injected and
// cleared on a host of the kind it applies to.
func TestFaultsByName(t *testing.T) {
	f := newTestFleet(t, Options{ControlPlanes: 1, GPUServers: 1})
	for _, info := range Faults() {
		t.Run(info.Name, func(t *testing.T) {
			if info.Description == "" {
				t.Error("no description")
			}
			fault, err := FaultByName(info.Name, "")
			if err != nil {
				t.Fatal(err)
			}
			if fault.Name() != info.Name {
				t.Errorf("built %s", fault.Name())
			}
			h := f.Host("gpu-1")
			if err := h.Inject(fault); err != nil {
				t.Fatal(err)
			}
			if got := h.ActiveFaults(); len(got) != 1 || got[0].Name() != info.Name {
				t.Errorf("active faults %v", got)
			}
			if err := h.Clear(info.Name); err != nil {
				t.Fatal(err)
			}
			if got := h.ActiveFaults(); len(got) != 0 {
				t.Errorf("after clear: %v", got)
			}
		})
	}
	if _, err := FaultByName("no-such-fault", ""); err == nil {
		t.Error("unknown fault accepted")
	}
	if _, err := FaultByName("gpu-missing", "many"); err == nil {
		t.Error("bad gpu-missing count accepted")
	}
	if err := f.Host("cp-1").Inject(GPUMissing{}); err == nil {
		t.Error("gpu-missing on a control plane accepted")
	}
}
