package intent

import "testing"

func TestKuredTakesLock(t *testing.T) {
	no, yes := false, true
	cases := []struct {
		name string
		k    *KuredSettings
		want bool
	}{
		{"no kured settings: kured's defaults, taken", nil, true},
		{"take_lock left out", &KuredSettings{Namespace: "kube-system", DaemonSet: "kured"}, true},
		{"take_lock true", &KuredSettings{Namespace: "kube-system", DaemonSet: "kured", TakeLock: &yes}, true},
		{"take_lock false", &KuredSettings{Namespace: "kube-system", DaemonSet: "kured", TakeLock: &no}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.k.TakesLock(); got != tc.want {
				t.Fatalf("TakesLock() = %v, want %v", got, tc.want)
			}
		})
	}
}
