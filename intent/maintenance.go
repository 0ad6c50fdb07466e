package intent

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/mcp-patch/mcp-patch/round/maintenance"
)

// MaintenanceSettings: when patch work may start a node (os-layer). A round
// drains a node only when its expected window fits before the maintenance
// window ends; a node in progress finishes.
type MaintenanceSettings struct {
	// Windows are the allowed maintenance windows; at least one, none
	// overlapping.
	Windows []maintenance.Declared `json:"windows"`
	// EstimatedWindowMinutes is the expected length of one node's window
	// (drain to green gate) until the round has measured its own. At least 1.
	EstimatedWindowMinutes int `json:"estimated_window_minutes"`
}

// Schedule compiles the windows (already validated when the settings were
// parsed). Nil settings are an unrestricted schedule.
func (m *MaintenanceSettings) Schedule() (maintenance.Schedule, error) {
	if m == nil {
		return maintenance.Schedule{}, nil
	}
	s, err := maintenance.Compile(m.Windows)
	if err != nil {
		return maintenance.Schedule{}, fmt.Errorf("maintenance windows: %w", err)
	}
	return s, nil
}

// Estimate is EstimatedWindowMinutes as a duration (zero on nil settings).
func (m *MaintenanceSettings) Estimate() time.Duration {
	if m == nil {
		return 0
	}
	return time.Duration(m.EstimatedWindowMinutes) * time.Minute
}

func (m *MaintenanceSettings) validate() []error {
	var errs []error
	if len(m.Windows) == 0 {
		errs = append(errs, errors.New("maintenance.windows: is empty; remove the section to allow work at any time"))
	}
	if m.EstimatedWindowMinutes < 1 {
		errs = append(errs, fmt.Errorf("maintenance.estimated_window_minutes: is %d, want at least 1", m.EstimatedWindowMinutes))
	}
	s, err := maintenance.Compile(m.Windows)
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			errs = append(errs, fmt.Errorf("maintenance.%s", line))
		}
		return errs
	}
	if longest := s.Longest(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); len(m.Windows) > 0 && longest < m.Estimate() {
		errs = append(errs, fmt.Errorf("maintenance.estimated_window_minutes: %d is longer than the longest window (%s); no node could ever start",
			m.EstimatedWindowMinutes, longest))
	}
	return errs
}
