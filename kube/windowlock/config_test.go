package windowlock

import (
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"
)

func TestExpired(t *testing.T) {
	now := time.Date(2025, 7, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		expires time.Time
		skew    time.Duration
		want    bool
	}{
		{"no expiry recorded", time.Time{}, 5 * time.Second, true},
		{"still valid", now.Add(time.Second), 5 * time.Second, false},
		{"expired but within the skew allowance", now.Add(-3 * time.Second), 5 * time.Second, false},
		{"expired beyond the skew allowance", now.Add(-6 * time.Second), 5 * time.Second, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := expired(Holder{ExpiresAt: tt.expires}, tt.skew, now); got != tt.want {
				t.Errorf("expired = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no identity", Config{}, "identity is required"},
		{"sub-second lease", Config{Identity: "a", LeaseDuration: 500 * time.Millisecond}, "under a second"},
		{"negative", Config{Identity: "a", ClockSkew: -time.Second}, "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Acquire(t.Context(), fake.NewClientset(), tt.cfg, "r", "n")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Acquire = %v, want %q", err, tt.want)
			}
		})
	}
}
