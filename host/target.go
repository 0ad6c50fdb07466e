package host

import (
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
	mu       sync.RWMutex
	defaults Target
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
	if !ok {
		t = defaults
		t.Name = node
		t.HostKeyAlias = ""
	}
	t.Address = address
	return m.Set(t)
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
// and the README's "SSH inventory" section describe it for people):
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

// LoadInventoryOver reads an inventory file (YAML). Fields a node leaves
// empty are taken from `defaults`, and fields `defaults` leaves empty from base
// (the config's ssh.user, ssh.port, ssh.jump and ssh.key_files); `jump: "-"`
// means no jump host even when a default names one. A jump that names no
// entry in the file, unknown fields and invalid values are errors naming
// the node.
func LoadInventoryOver(path string, base Target) (*MapInventory, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load inventory: %w", err)
	}
	inv, err := ParseInventoryOver(data, base)
	if err != nil {
		return nil, fmt.Errorf("load inventory %s: %w", path, err)
	}
	return inv, nil
}

// LoadInventory is LoadInventoryOver with nothing beneath the file's defaults.
func LoadInventory(path string) (*MapInventory, error) { return LoadInventoryOver(path, Target{}) }

// ParseInventory is ParseInventoryOver with nothing beneath the file's defaults.
func ParseInventory(data []byte) (*MapInventory, error) { return ParseInventoryOver(data, Target{}) }

// ParseInventoryOver parses the YAML form described at LoadInventoryOver.
func ParseInventoryOver(data []byte, base Target) (*MapInventory, error) {
	var f inventoryFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("parse inventory: %w", err)
	}
	if f.Defaults.Address != "" || f.Defaults.HostKeyAlias != "" {
		return nil, errors.New("parse inventory: defaults may not set address or host_key_alias")
	}
	f.Defaults = layerDefaults(f.Defaults, base)
	names := make([]string, 0, len(f.Nodes))
	for n := range f.Nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	inv := &MapInventory{defaults: f.Defaults, targets: make(map[string]Target, len(f.Nodes))}
	for _, name := range names {
		t := f.Nodes[name]
		t.Name = name
		if t.Port == 0 {
			t.Port = f.Defaults.Port
		}
		if t.User == "" {
			t.User = f.Defaults.User
		}
		switch {
		case t.Jump == noJump:
			t.Jump = ""
		case t.Jump == "" && f.Defaults.Jump != name:
			t.Jump = f.Defaults.Jump
		}
		if len(t.IdentityFiles) == 0 {
			t.IdentityFiles = f.Defaults.IdentityFiles
		}
		if t.Jump != "" {
			if _, ok := f.Nodes[t.Jump]; !ok {
				if t.Jump == base.Jump && f.Defaults.Jump == base.Jump {
					return nil, fmt.Errorf("parse inventory: node %s: the config's ssh.jump %q is not a node in the inventory (add it, or set jump: \"-\" for nodes reached directly)", name, t.Jump)
				}
				return nil, fmt.Errorf("parse inventory: node %s: jump %q is not a node in the inventory", name, t.Jump)
			}
		}
		if err := inv.Set(t); err != nil {
			return nil, fmt.Errorf("parse inventory: %w", err)
		}
	}
	return inv, nil
}

// layerDefaults fills what the file's defaults leave empty from base (the
// config's ssh section); a "-" jump in the file's defaults cancels base's.
func layerDefaults(file, base Target) Target {
	if file.Port == 0 {
		file.Port = base.Port
	}
	if file.User == "" {
		file.User = base.User
	}
	switch file.Jump {
	case noJump:
		file.Jump = ""
	case "":
		file.Jump = base.Jump
	}
	if len(file.IdentityFiles) == 0 {
		file.IdentityFiles = base.IdentityFiles
	}
	return file
}
