package parse

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseBondingFixtures(t *testing.T) {
	tests := []struct {
		name     string
		file     string
		mode     string
		active   string
		agg      string
		slaves   []string // name=mii
		problems []string
	}{
		{
			name: "802.3ad one slave down, churned", file: "net/proc-net-bonding-bond0_8023ad-lacp-fast_one-slave-down_centos.txt",
			mode: "IEEE 802.3ad Dynamic link aggregation", agg: "2",
			slaves:   []string{"enp1s0f0=down", "enp1s0f1=up"},
			problems: []string{"bond0 slave enp1s0f0 MII status is down", "bond0 slave enp1s0f1 LACP is churned"},
		},
		{
			name: "802.3ad two slaves up", file: "net/proc-net-bonding_8023ad-lacp_2x10G_telegraf.txt",
			mode: "IEEE 802.3ad Dynamic link aggregation", slaves: []string{"eth0=up", "eth1=up"},
		},
		{
			name: "active-backup, eth3 down", file: "net/proc-net-bonding_active-backup_eth2-primary-eth3-down_telegraf.txt",
			mode: "fault-tolerance (active-backup)", active: "eth2", slaves: []string{"eth3=down", "eth2=up"},
			problems: []string{"bond0 slave eth3 MII status is down"},
		},
		{
			name: "active-backup both up", file: "net/proc-net-bonding-bond0_active-backup_fail_over_mac-active_both-up_centos7.txt",
			mode: "fault-tolerance (active-backup) (fail_over_mac active)", active: "eth1", slaves: []string{"eth1=up", "eth2=up"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := ParseBonding("bond0", fixture(t, tc.file))
			var slaves []string
			for _, s := range b.Slaves {
				slaves = append(slaves, s.Name+"="+s.MIIStatus)
			}
			got := []any{b.Mode, b.ActiveSlave, b.ActiveAggregatorID, slaves, b.Problems()}
			want := []any{tc.mode, tc.active, tc.agg, tc.slaves, tc.problems}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("(-want +got)\n%s", d)
			}
			if b.MIIStatus != "up" {
				t.Errorf("bond MII %q", b.MIIStatus)
			}
		})
	}
}

func TestSysfsRDMAPort(t *testing.T) {
	p := SysfsRDMAPort("mlx5_0", "1", "4: ACTIVE\n", "5: LinkUp\n", "InfiniBand\n", "400 Gb/sec (4X NDR)\n")
	if !p.Up() || p.Rate != "400 Gb/sec (4X NDR)" {
		t.Errorf("%+v", p)
	}
	if SysfsRDMAPort("mlx5_1", "1", "1: DOWN", "3: Disabled", "", "").Up() {
		t.Error("down port is up")
	}
}

func FuzzParseNet(f *testing.F) {
	for _, p := range fixtureFiles(f, "net", "") {
		f.Add(fixture(f, strings.TrimPrefix(p, "testdata/fixtures/")))
	}
	f.Fuzz(func(t *testing.T, text string) {
		b := ParseBonding("b", text)
		_ = b.Problems()
	})
}
