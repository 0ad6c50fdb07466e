package host

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"sync"

	"sigs.k8s.io/yaml"
)

// ErrUnknownNode is returned (wrapped) when a node is not in the inventory.
var ErrUnknownNode = errors.New("node not in inventory")

// DefaultPort is the SSH port used when a Target leaves Port at zero.
const DefaultPort = 22

// Target says how to reach one node over SSH.
type Target struct {
	// Name is the node name the rest of mcp-patch uses (the Kubernetes node
	// name). Required; letters, digits, '.', '_' and '-' only.
	Name string `json:"-"`
	// Address is the IP address or DNS name to connect to (for cluster
	// nodes, their InternalIP). Required.
	Address string `json:"address"`
	// Port is the SSH port; 0 means 22.
	Port int `json:"port,omitempty"`
	// User is the login user; empty means "root". A user other than root
	// runs scripts through `sudo -n`.
	User string `json:"user,omitempty"`
	// Jump names another inventory entry (a bastion) through whose SSH
	// connection this node is reached. Empty means a direct connection.
	Jump string `json:"jump,omitempty"`
	// IdentityFiles are private key files tried for this host after the
	// agent's keys and the pool-wide key files. Unencrypted keys only:
	// passphrase-protected keys belong in ssh-agent.
	IdentityFiles []string `json:"identity_files,omitempty"`
	// HostKeyAlias, when set, is the name looked up in known_hosts instead
	// of Address (like OpenSSH's HostKeyAlias), e.g. when known_hosts lists
	// nodes by hostname but the inventory dials their InternalIP.
	HostKeyAlias string `json:"host_key_alias,omitempty"`
	// ConfigIdentityFiles are the IdentityFile lines of the OpenSSH
	// configuration for this node, used when the inventory names no
	// identity file. Unlike IdentityFiles, one that is missing or
	// passphrase-protected (and not in the agent) is skipped with a note,
	// as ssh(1) does.
	ConfigIdentityFiles []string `json:"-"`
	// IdentityAgent is the OpenSSH configuration's IdentityAgent for this
	// node: the agent socket asked instead of the pool's AgentSocket, "none"
	// for no agent, "SSH_AUTH_SOCK" or empty for the pool's.
	IdentityAgent string `json:"-"`
	// SSHConfigLines say which lines of the OpenSSH configuration gave this
	// target a value ("User ubuntu (/home/a/.ssh/config:4)") and which
	// apply but are not followed; doctor prints them.
	SSHConfigLines []string `json:"-"`
}

var (
	nodeNamePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`) })
	// POSIX portable user names, as useradd accepts them by default.
	userPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`) })
	// A DNS name or IPv4 literal; IPv6 literals are checked with net.ParseIP.
	addressPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$`) })
)

// ValidateNodeName refuses node names that are empty or carry anything but
// letters, digits, '.', '_' and '-' (so a name can never reach a shell or a
// known_hosts pattern as something else).
func ValidateNodeName(name string) error {
	if !nodeNamePattern().MatchString(name) {
		return fmt.Errorf("invalid node name %q: want letters, digits, '.', '_' or '-' (max 253), starting with a letter or digit", name)
	}
	return nil
}

// Validate checks every field and returns an error naming the first bad one.
func (t Target) Validate() error {
	if err := ValidateNodeName(t.Name); err != nil {
		return err
	}
	if t.Address == "" {
		return fmt.Errorf("node %s: address is required", t.Name)
	}
	if net.ParseIP(t.Address) == nil && !addressPattern().MatchString(t.Address) {
		return fmt.Errorf("node %s: address %q is neither an IP address nor a DNS name", t.Name, t.Address)
	}
	if t.Port < 0 || t.Port > 65535 {
		return fmt.Errorf("node %s: port %d out of range 1-65535", t.Name, t.Port)
	}
	if t.User != "" && !userPattern().MatchString(t.User) {
		return fmt.Errorf("node %s: user %q is not a valid login name", t.Name, t.User)
	}
	if t.Jump != "" {
		if err := ValidateNodeName(t.Jump); err != nil {
			return fmt.Errorf("node %s: jump: %w", t.Name, err)
		}
		if t.Jump == t.Name {
			return fmt.Errorf("node %s: jump names the node itself", t.Name)
		}
	}
	if t.HostKeyAlias != "" && net.ParseIP(t.HostKeyAlias) == nil && !addressPattern().MatchString(t.HostKeyAlias) {
		return fmt.Errorf("node %s: host_key_alias %q is neither an IP address nor a DNS name", t.Name, t.HostKeyAlias)
	}
	for _, f := range t.IdentityFiles {
		if f == "" {
			return fmt.Errorf("node %s: empty identity file path", t.Name)
		}
	}
	return nil
}

// LoginUser is User, or "root" when User is empty.
func (t Target) LoginUser() string {
	if t.User == "" {
		return "root"
	}
	return t.User
}

// DialAddr is "address:port" for the TCP connection.
func (t Target) DialAddr() string {
	port := t.Port
	if port == 0 {
		port = DefaultPort
	}
	return net.JoinHostPort(t.Address, strconv.Itoa(port))
}

// knownHostsAddr is the "host:port" looked up in known_hosts
// ("[host]:port" there for ports other than 22).
func (t Target) knownHostsAddr() string {
	host := t.Address
	if t.HostKeyAlias != "" {
		host = t.HostKeyAlias
	}
	port := t.Port
	if port == 0 {
		port = DefaultPort
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// Inventory resolves node names to SSH targets. Lookup returns an error
// wrapping ErrUnknownNode for a node it does not know.
type Inventory interface {
	Lookup(node string) (Target, error)
}

// MapInventory is an Inventory held in memory. It is safe for concurrent use,
// so the cluster side can feed InternalIPs in (SetAddress) while lookups run.
type MapInventory struct {
	mu sync.RWMutex
	// defaults, then what openssh says for the node, then base fill the
	// entries SetAddress creates (see layerTarget).
	defaults Target
	openssh  *OpenSSHConfig
	base     Target
	targets  map[string]Target
}

var _ Inventory = (*MapInventory)(nil)

// NewMapInventory returns an inventory holding targets. defaults supplies
// Port, User, Jump and IdentityFiles for entries created by SetAddress.
// Every target is validated; the first invalid one is returned as an error.
func NewMapInventory(defaults Target, targets ...Target) (*MapInventory, error) {
	inv := &MapInventory{defaults: defaults, targets: make(map[string]Target, len(targets))}
	for _, t := range targets {
		if err := inv.Set(t); err != nil {
			return nil, err
		}
	}
	return inv, nil
}

// Set adds or replaces a target after validating it.
func (m *MapInventory) Set(t Target) error {
	if err := t.Validate(); err != nil {
		return fmt.Errorf("inventory: %w", err)
	}
	t.IdentityFiles = slices.Clone(t.IdentityFiles)
	t.ConfigIdentityFiles = slices.Clone(t.ConfigIdentityFiles)
	t.SSHConfigLines = slices.Clone(t.SSHConfigLines)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.targets == nil {
		m.targets = make(map[string]Target)
	}
	m.targets[t.Name] = t
	return nil
}

// SetAddress sets the address of node, creating the entry from the
// inventory defaults when it does not exist yet. This is how the cluster's
// InternalIP reaches the SSH layer.
func (m *MapInventory) SetAddress(node, address string) error {
	m.mu.RLock()
	t, ok := m.targets[node]
	defaults := m.defaults
	m.mu.RUnlock()
	if ok {
		t.Address = address
		return m.Set(t)
	}
	oh, err := m.openssh.Resolve(node)
	if err != nil {
		return fmt.Errorf("inventory: node %s: %w", node, err)
	}
	l, err := layerTarget(Target{Name: node}, defaults, oh, m.base)
	if err != nil {
		return fmt.Errorf("inventory: %w", err)
	}
	t = l.Target
	if t.Address == "" {
		// The cluster's InternalIP, unless ~/.ssh/config names a HostName.
		t.Address = address
	}
	if err := m.Set(t); err != nil {
		return err
	}
	if l.Jump == jumpFromOpenSSH {
		if err := m.addHops(l.Hops, oh.ProxyJump); err != nil {
			return fmt.Errorf("inventory: node %s: %w", node, err)
		}
	}
	return nil
}

func (m *MapInventory) lookupRaw(node string) (Target, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	t, ok := m.targets[node]
	return t, ok
}

// Lookup returns the target for node.
func (m *MapInventory) Lookup(node string) (Target, error) {
	if err := ValidateNodeName(node); err != nil {
		return Target{}, err
	}
	m.mu.RLock()
	t, ok := m.targets[node]
	m.mu.RUnlock()
	if !ok {
		return Target{}, fmt.Errorf("look up node %s: %w", node, ErrUnknownNode)
	}
	t.IdentityFiles = slices.Clone(t.IdentityFiles)
	t.ConfigIdentityFiles = slices.Clone(t.ConfigIdentityFiles)
	t.SSHConfigLines = slices.Clone(t.SSHConfigLines)
	return t, nil
}

// Nodes returns the names of every entry, sorted.
func (m *MapInventory) Nodes() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	names := make([]string, 0, len(m.targets))
	for n := range m.targets {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// inventoryFile is the on-disk shape of an inventory (examples/inventory.yaml
// and docs/getting-started.md's "SSH inventory" section describe it for people):
//
//	defaults:
//	  user: ubuntu
//	  port: 22
//	  identity_files: [/etc/mcp-patch/id_ed25519]
//	nodes:
//	  bastion-1: {address: 203.0.113.10, jump: "-"}
//	  gpu-01:    {address: 10.0.0.11, jump: bastion-1}
type inventoryFile struct {
	Defaults Target            `json:"defaults"`
	Nodes    map[string]Target `json:"nodes"`
}

// noJump in a node's jump field overrides a default jump host: the node is
// dialled directly.
const noJump = "-"

// LoadInventoryOver reads an inventory file (YAML) with nothing from an
// OpenSSH configuration: LoadInventoryWith(path, base, nil).
func LoadInventoryOver(path string, base Target) (*MapInventory, error) {
	return LoadInventoryWith(path, base, nil)
}

// LoadInventoryWith reads an inventory file (YAML). Fields a node leaves
// empty are taken from `defaults`, then from what the OpenSSH configuration
// oc (nil: none) says for the node's name, then from base (the config's
// ssh.user, ssh.port, ssh.jump and ssh.key_files): the inventory wins where
// both say something. `jump: "-"` means no jump host even when a default or
// a ProxyJump names one. A jump that names no entry in the file (a ProxyJump
// hop becomes an entry of its own), unknown fields and invalid values are
// errors naming the node.
func LoadInventoryWith(path string, base Target, oc *OpenSSHConfig) (*MapInventory, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load inventory: %w", err)
	}
	inv, err := ParseInventoryWith(data, base, oc)
	if err != nil {
		return nil, fmt.Errorf("load inventory %s: %w", path, err)
	}
	return inv, nil
}

// LoadInventory is LoadInventoryOver with nothing beneath the file's defaults.
func LoadInventory(path string) (*MapInventory, error) { return LoadInventoryOver(path, Target{}) }

// ParseInventory is ParseInventoryOver with nothing beneath the file's defaults.
func ParseInventory(data []byte) (*MapInventory, error) { return ParseInventoryOver(data, Target{}) }

// ParseInventoryOver is ParseInventoryWith without an OpenSSH configuration.
func ParseInventoryOver(data []byte, base Target) (*MapInventory, error) {
	return ParseInventoryWith(data, base, nil)
}

// NewInventoryFrom is an inventory with no file: the entries SetAddress
// creates take what oc (nil: nothing) says for their name, then base.
func NewInventoryFrom(base Target, oc *OpenSSHConfig) (*MapInventory, error) {
	if err := base.validateDefaults(); err != nil {
		return nil, err
	}
	return &MapInventory{openssh: oc, base: base, targets: map[string]Target{}}, nil
}

// validateDefaults checks the fields a defaults Target may carry.
func (t Target) validateDefaults() error {
	probe := t
	probe.Name, probe.Address = "defaults", "127.0.0.1"
	if probe.Jump == noJump || probe.Jump == probe.Name {
		probe.Jump = ""
	}
	return probe.Validate()
}

// ParseInventoryWith parses the YAML form described at LoadInventoryWith.
func ParseInventoryWith(data []byte, base Target, oc *OpenSSHConfig) (*MapInventory, error) {
	var f inventoryFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("parse inventory: %w", err)
	}
	if f.Defaults.Address != "" || f.Defaults.HostKeyAlias != "" {
		return nil, errors.New("parse inventory: defaults may not set address or host_key_alias")
	}
	names := make([]string, 0, len(f.Nodes))
	for n := range f.Nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	inv := &MapInventory{defaults: f.Defaults, openssh: oc, base: base, targets: make(map[string]Target, len(f.Nodes))}
	type pending struct {
		t   Target
		l   layered
		via Setting
	}
	var all []pending
	for _, name := range names {
		own := f.Nodes[name]
		own.Name = name
		oh, err := oc.Resolve(name)
		if err != nil {
			return nil, fmt.Errorf("parse inventory: node %s: %w", name, err)
		}
		l, err := layerTarget(own, f.Defaults, oh, base)
		if err != nil {
			return nil, fmt.Errorf("parse inventory: %w", err)
		}
		all = append(all, pending{l.Target, l, oh.ProxyJump})
	}
	for _, p := range all {
		if err := inv.Set(p.t); err != nil {
			return nil, fmt.Errorf("parse inventory: %w", err)
		}
	}
	for _, p := range all {
		t := p.t
		if t.Jump == "" {
			continue
		}
		if _, ok := f.Nodes[t.Jump]; ok {
			continue
		}
		switch p.l.Jump {
		case jumpFromOpenSSH:
			if err := inv.addHops(p.l.Hops, p.via); err != nil {
				return nil, fmt.Errorf("parse inventory: node %s: %w", t.Name, err)
			}
		case jumpFromBase:
			return nil, fmt.Errorf("parse inventory: node %s: the config's ssh.jump %q is not a node in the inventory (add it, or set jump: \"-\" for nodes reached directly)", t.Name, t.Jump)
		default:
			return nil, fmt.Errorf("parse inventory: node %s: jump %q is not a node in the inventory", t.Name, t.Jump)
		}
	}
	return inv, nil
}

// addHops makes an entry for each ProxyJump hop the inventory does not
// name: reached through the hop before it, the first one directly (or
// through its own ProxyJump), each with what the OpenSSH configuration says
// for it and the user and port the hop names.
func (m *MapInventory) addHops(hops []jumpHop, via Setting) error {
	prev := ""
	for _, hop := range hops {
		if _, ok := m.lookupRaw(hop.Host); ok {
			prev = hop.Host
			continue
		}
		oh, err := m.openssh.Resolve(hop.Host)
		if err != nil {
			return fmt.Errorf("ProxyJump %s: %w", hop.Host, err)
		}
		own := Target{Name: hop.Host, User: hop.User, Port: hop.Port, Jump: cmp.Or(prev, noJump)}
		if prev == "" && oh.ProxyJump.Value != "" {
			own.Jump = ""
		}
		base := m.base
		base.Jump = ""
		l, err := layerTarget(own, Target{}, oh, base)
		if err != nil {
			return err
		}
		t := l.Target
		if t.Address == "" {
			t.Address = hop.Host
		}
		t.SSHConfigLines = append([]string{fmt.Sprintf("a ProxyJump hop (%s)", via.At)}, t.SSHConfigLines...)
		if err := m.Set(t); err != nil {
			return err
		}
		if l.Jump == jumpFromOpenSSH {
			if err := m.addHops(l.Hops, oh.ProxyJump); err != nil {
				return err
			}
		}
		prev = hop.Host
	}
	return nil
}

// jumpSource says which layer gave a target its jump host.
type jumpSource int

const (
	jumpNone jumpSource = iota
	jumpFromNode
	jumpFromDefaults
	jumpFromOpenSSH
	jumpFromBase
)

// layered is a target filled in by layerTarget, with where its jump came
// from and, for a ProxyJump, its hops (the last one is Target.Jump).
type layered struct {
	Target Target
	Jump   jumpSource
	Hops   []jumpHop
}

// layerTarget fills what own (a node's entry in the inventory file) leaves
// empty: from defaults (the file's defaults), then from oh (what the
// OpenSSH configuration says for the node's name), then from base (the
// config's ssh section). A "-" jump, in own or defaults, and "ProxyJump
// none" mean a direct connection; a node never jumps through itself. The
// address comes from own, else HostName; it stays empty when neither says
// one. Pure.
func layerTarget(own, defaults Target, oh OpenSSHHost, base Target) (layered, error) {
	t := own
	var lines []string
	from := func(s Setting, what string) string {
		lines = append(lines, fmt.Sprintf("%s %s (%s)", what, s.Value, s.At))
		return s.Value
	}
	if t.Address == "" && oh.HostName.Value != "" {
		t.Address = from(oh.HostName, "HostName")
	}
	if t.Port == 0 {
		t.Port = defaults.Port
	}
	if t.Port == 0 && oh.Port.Value != "" {
		t.Port, _ = strconv.Atoi(from(oh.Port, "Port")) // Resolve checked it is a number
	}
	if t.Port == 0 {
		t.Port = base.Port
	}
	t.User = cmp.Or(t.User, defaults.User)
	if t.User == "" && oh.User.Value != "" {
		t.User = from(oh.User, "User")
	}
	t.User = cmp.Or(t.User, base.User)
	if len(t.IdentityFiles) == 0 {
		t.IdentityFiles = defaults.IdentityFiles
	}
	if len(t.IdentityFiles) == 0 {
		for _, f := range oh.IdentityFiles {
			t.ConfigIdentityFiles = append(t.ConfigIdentityFiles, from(f, "IdentityFile"))
		}
	}
	if len(t.IdentityFiles) == 0 && len(t.ConfigIdentityFiles) == 0 {
		t.IdentityFiles = base.IdentityFiles
	}
	if oh.IdentityAgent.Value != "" {
		t.IdentityAgent = from(oh.IdentityAgent, "IdentityAgent")
	}
	out := layered{Jump: jumpNone}
	switch {
	case t.Jump == noJump:
		t.Jump = ""
	case t.Jump != "":
		out.Jump = jumpFromNode
	case defaults.Jump == noJump:
	case defaults.Jump != "":
		t.Jump, out.Jump = defaults.Jump, jumpFromDefaults
	case oh.ProxyJump.Value != "":
		hops, err := parseProxyJump(oh.ProxyJump.Value)
		if err != nil {
			return layered{}, fmt.Errorf("node %s: ssh config %s: %w", own.Name, oh.ProxyJump.At, err)
		}
		from(oh.ProxyJump, "ProxyJump")
		if len(hops) > 0 {
			t.Jump, out.Jump, out.Hops = hops[len(hops)-1].Host, jumpFromOpenSSH, hops
		}
	case base.Jump != "":
		t.Jump, out.Jump = base.Jump, jumpFromBase
	}
	if t.Jump == own.Name && out.Jump != jumpFromNode {
		t.Jump, out.Jump, out.Hops = "", jumpNone, nil
	}
	t.SSHConfigLines = append(lines, oh.Notes...)
	out.Target = t
	return out, nil
}
