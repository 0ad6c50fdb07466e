package service

import (
	"time"

	"github.com/mcp-patch/mcp-patch/intent"
	"github.com/mcp-patch/mcp-patch/round/maintenance"
	"github.com/mcp-patch/mcp-patch/round/window"
)

// RoundMaintenance is where the open round stands against the intent's
// maintenance windows now (window.Maintenance); ok is false without a
// round or without a maintenance section (work may start at any time).
func RoundMaintenance(s *window.Round, now time.Time) (maintenance.Schedule, window.MaintenanceView, bool, error) {
	if s == nil {
		return maintenance.Schedule{}, window.MaintenanceView{}, false, nil
	}
	return window.Maintenance(s.Settings.Maintenance, s.Journal.Shared().WindowDurations(), now)
}

// admitMaintenance is the maintenance rule before node's window opens
// (window.AdmitMaintenance): a refusal waits, it does not stop the round.
func (d *Service) admitMaintenance(s *window.Round, node string) error {
	if s == nil {
		return nil
	}
	return FromWindow(window.AdmitMaintenance(s.Settings.Maintenance, s.Journal.Shared().WindowDurations(), d.Clock(), node))
}

func SettingsOrZero(s *window.Round) intent.Settings {
	if s == nil {
		return intent.Settings{}
	}
	return s.Settings
}
