package parse

import (
	"strconv"
	"strings"
)

// Bond is one /proc/net/bonding/<bond> file.
type Bond struct {
	Name string `json:"name"`
	// Mode is the "Bonding Mode" text, e.g. "IEEE 802.3ad Dynamic link
	// aggregation" or "fault-tolerance (active-backup)".
	Mode         string `json:"mode"`
	MIIStatus    string `json:"mii_status"`
	ActiveSlave  string `json:"active_slave,omitempty"`
	PrimarySlave string `json:"primary_slave,omitempty"`
	// LACPRate and ActiveAggregatorID are set in 802.3ad mode.
	LACPRate           string      `json:"lacp_rate,omitempty"`
	ActiveAggregatorID string      `json:"active_aggregator_id,omitempty"`
	Slaves             []BondSlave `json:"slaves"`
}

// BondSlave is one "Slave Interface" block.
type BondSlave struct {
	Name              string `json:"name"`
	MIIStatus         string `json:"mii_status"`
	Speed             string `json:"speed,omitempty"`
	Duplex            string `json:"duplex,omitempty"`
	LinkFailureCount  int    `json:"link_failure_count"`
	AggregatorID      string `json:"aggregator_id,omitempty"`
	ActorChurnState   string `json:"actor_churn_state,omitempty"`
	PartnerChurnState string `json:"partner_churn_state,omitempty"`
}

// Problems lists what is wrong with the bond: the bond or a slave not up,
// no slaves, and in 802.3ad mode a slave outside the active aggregator or
// churned.
func (b Bond) Problems() []string {
	var p []string
	if b.MIIStatus != "up" {
		p = append(p, b.Name+" MII status is "+quoteOrEmpty(b.MIIStatus))
	}
	if len(b.Slaves) == 0 {
		p = append(p, b.Name+" has no slaves")
	}
	for _, s := range b.Slaves {
		if s.MIIStatus != "up" {
			p = append(p, b.Name+" slave "+s.Name+" MII status is "+quoteOrEmpty(s.MIIStatus))
			continue
		}
		if b.ActiveAggregatorID != "" && s.AggregatorID != "" && s.AggregatorID != b.ActiveAggregatorID {
			p = append(p, b.Name+" slave "+s.Name+" is in aggregator "+s.AggregatorID+", not the active "+b.ActiveAggregatorID)
		}
		if s.ActorChurnState == "churned" || s.PartnerChurnState == "churned" {
			p = append(p, b.Name+" slave "+s.Name+" LACP is churned")
		}
	}
	return p
}

func quoteOrEmpty(s string) string {
	if s == "" {
		return "missing"
	}
	return s
}

// ParseBonding reads /proc/net/bonding/<name>. Unknown lines are ignored.
func ParseBonding(name, text string) Bond {
	b := Bond{Name: name, Slaves: []BondSlave{}}
	var cur *BondSlave
	inAggInfo := false
	for _, raw := range strings.Split(text, "\n") {
		indented := strings.HasPrefix(raw, "\t") || strings.HasPrefix(raw, " ")
		line := strings.TrimSpace(raw)
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if k == "Slave Interface" {
			b.Slaves = append(b.Slaves, BondSlave{Name: v})
			cur = &b.Slaves[len(b.Slaves)-1]
			inAggInfo = false
			continue
		}
		if k == "Active Aggregator Info" {
			inAggInfo = true
			continue
		}
		if cur == nil {
			switch {
			case k == "Bonding Mode":
				b.Mode = v
			case k == "MII Status" && b.MIIStatus == "":
				b.MIIStatus = v
			case k == "Currently Active Slave":
				b.ActiveSlave = v
			case k == "Primary Slave":
				if f := strings.Fields(v); len(f) > 0 && f[0] != "None" {
					b.PrimarySlave = f[0]
				}
			case k == "LACP rate":
				b.LACPRate = v
			case k == "Aggregator ID" && inAggInfo && indented:
				b.ActiveAggregatorID = v
			}
			continue
		}
		if indented {
			continue // details actor/partner lacp pdu
		}
		switch k {
		case "MII Status":
			cur.MIIStatus = v
		case "Speed":
			cur.Speed = v
		case "Duplex":
			cur.Duplex = v
		case "Link Failure Count":
			cur.LinkFailureCount = atoi(v)
		case "Aggregator ID":
			cur.AggregatorID = v
		case "Actor Churn State":
			cur.ActorChurnState = v
		case "Partner Churn State":
			cur.PartnerChurnState = v
		}
	}
	return b
}

// RDMAPort is one port of an RDMA device, from ibstat, sysfs or `rdma link`.
type RDMAPort struct {
	Device string `json:"device"`
	Port   int    `json:"port"`
	// State is the logical state, normalised to upper case: "ACTIVE",
	// "DOWN", "INIT", "ARMED".
	State string `json:"state"`
	// PhysState is the physical state, normalised: "LINKUP", "DISABLED",
	// "POLLING", ...
	PhysState string `json:"phys_state"`
	LinkLayer string `json:"link_layer,omitempty"`
	Rate      string `json:"rate,omitempty"`
	Netdev    string `json:"netdev,omitempty"`
	CAType    string `json:"ca_type,omitempty"`
	Firmware  string `json:"firmware,omitempty"`
}

// Up is true for an ACTIVE port with its link up.
func (p RDMAPort) Up() bool { return p.State == "ACTIVE" && p.PhysState == "LINKUP" }

// normState turns "4: ACTIVE", "Active", "LinkUp", "LINK_UP", "5: LinkUp"
// into "ACTIVE" / "LINKUP".
func normState(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, ':'); i >= 0 {
		if _, err := strconv.Atoi(strings.TrimSpace(s[:i])); err == nil {
			s = strings.TrimSpace(s[i+1:])
		}
	}
	return strings.ToUpper(strings.ReplaceAll(s, "_", ""))
}

// SysfsRDMAPort builds a port from the sysfs files of
// /sys/class/infiniband/<dev>/ports/<n>/ (state "4: ACTIVE", phys_state
// "5: LinkUp", link_layer, rate).
func SysfsRDMAPort(dev, port, state, physState, linkLayer, rate string) RDMAPort {
	return RDMAPort{
		Device: dev, Port: atoi(port), State: normState(state), PhysState: normState(physState),
		LinkLayer: strings.TrimSpace(linkLayer), Rate: strings.TrimSpace(rate),
	}
}
