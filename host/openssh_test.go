package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// writeHome makes a home directory holding .ssh/config (config) and the
// other files under .ssh that files names.
func writeHome(t *testing.T, config string, files map[string]string) string {
	t.Helper()
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	files["config"] = config
	for name, body := range files {
		p := filepath.Join(home, ".ssh", name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return home
}

func TestOpenSSHConfigResolve(t *testing.T) {
	const config = `# fleet access
Host gpu-* !gpu-99
    HostName %h.mgmt.example
    User ops
    IdentityFile ~/.ssh/fleet_%n
    ProxyJump bastion

Host gpu-01
    Port 2222
    User ignored-first-wins
Host *
Include conf.d/*.conf

Match user someone
    User matched

Host *
    User fallback
    IdentityFile %d/.ssh/all
    ProxyCommand nc %h %p
`
	home := writeHome(t, config, map[string]string{
		"conf.d/a.conf": "Host gpu-02\n  Port 2202\n",
	})
	cfgPath := DefaultOpenSSHConfig(home)
	at := func(line int) string { return cfgPath + ":" + strconv.Itoa(line) }
	oc, err := LoadOpenSSHConfig(cfgPath, home)
	if err != nil {
		t.Fatal(err)
	}
	matchNote := `"Match user someone" at ` + at(14) + ` is not applied (Match blocks are not read; use Host)`
	proxyNote := "ProxyCommand at " + at(20) + " is not followed (use ProxyJump, or jump in the inventory)"
	tests := []struct {
		alias string
		want  OpenSSHHost
	}{
		{
			alias: "gpu-01",
			want: OpenSSHHost{
				HostName:  Setting{"gpu-01.mgmt.example", at(3)},
				Port:      Setting{"2222", at(9)},
				User:      Setting{"ops", at(4)},
				ProxyJump: Setting{"bastion", at(6)},
				IdentityFiles: []Setting{
					{filepath.Join(home, ".ssh", "fleet_gpu-01"), at(5)},
					{filepath.Join(home, ".ssh", "all"), at(19)},
				},
				Notes: []string{matchNote, proxyNote},
			},
		},
		{
			alias: "gpu-02",
			want: OpenSSHHost{
				HostName:  Setting{"gpu-02.mgmt.example", at(3)},
				Port:      Setting{"2202", filepath.Join(home, ".ssh", "conf.d", "a.conf") + ":2"},
				User:      Setting{"ops", at(4)},
				ProxyJump: Setting{"bastion", at(6)},
				IdentityFiles: []Setting{
					{filepath.Join(home, ".ssh", "fleet_gpu-02"), at(5)},
					{filepath.Join(home, ".ssh", "all"), at(19)},
				},
				Notes: []string{matchNote, proxyNote},
			},
		},
		{
			alias: "gpu-99", // negated: only Host * applies
			want: OpenSSHHost{
				User:          Setting{"fallback", at(18)},
				IdentityFiles: []Setting{{filepath.Join(home, ".ssh", "all"), at(19)}},
				Notes:         []string{matchNote, proxyNote},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.alias, func(t *testing.T) {
			got, err := oc.Resolve(tc.alias)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Resolve(%s) (-want +got):\n%s", tc.alias, diff)
			}
		})
	}
}

func TestOpenSSHConfigRefusals(t *testing.T) {
	tests := []struct {
		name, config, alias, wantErr string
	}{
		{name: "port not a number", config: "Host a\n  Port ssh\n", alias: "a", wantErr: `config:2: Port "ssh" is not a port number`},
		{name: "unknown token", config: "Host a\n  IdentityFile ~/.ssh/id_%C\n", alias: "a", wantErr: "config:2: IdentityFile: token %C"},
		{name: "lone percent", config: "Host a\n  HostName a%\n", alias: "a", wantErr: "lone %"},
		{name: "an agent named by a variable", config: "Host a\n  IdentityAgent $AGENT_SOCK\n", alias: "a", wantErr: "config:2: IdentityAgent $AGENT_SOCK: environment variables"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			home := writeHome(t, tc.config, map[string]string{})
			oc, err := LoadOpenSSHConfig(DefaultOpenSSHConfig(home), home)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := oc.Resolve(tc.alias); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
	t.Run("an Include that includes itself names its line", func(t *testing.T) {
		home := writeHome(t, "\nInclude config\n", map[string]string{})
		_, err := LoadOpenSSHConfig(DefaultOpenSSHConfig(home), home)
		if err == nil || !strings.Contains(err.Error(), "config:2: Include") || !strings.Contains(err.Error(), "nested Include") {
			t.Fatalf("err = %v, want the Include line named", err)
		}
	})
	t.Run("no home", func(t *testing.T) {
		if _, err := LoadOpenSSHConfig("/nonexistent", ""); err == nil {
			t.Fatal("no error without a home directory")
		}
	})
}

func TestParseProxyJump(t *testing.T) {
	tests := []struct {
		in      string
		want    []jumpHop
		wantErr string
	}{
		{in: "none"},
		{in: "bastion", want: []jumpHop{{Host: "bastion"}}},
		{in: "ops@bastion:2222", want: []jumpHop{{User: "ops", Host: "bastion", Port: 2222}}},
		{in: "ssh://a@outer,inner:22", want: []jumpHop{{User: "a", Host: "outer"}, {Host: "inner", Port: 22}}},
		{in: "bastion:http", wantErr: "is not a port number"},
		{in: "[::1]:22", wantErr: `ProxyJump "[::1]:22"`},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseProxyJump(tc.in)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// The inventory wins where it and ~/.ssh/config both say something; the
// config's ssh section lies beneath both.
func TestLayerTarget(t *testing.T) {
	oh := OpenSSHHost{
		HostName:      Setting{"10.0.0.5", "c:2"},
		Port:          Setting{"2222", "c:3"},
		User:          Setting{"ops", "c:4"},
		ProxyJump:     Setting{"hop1,hop2", "c:5"},
		IdentityFiles: []Setting{{"/h/.ssh/k", "c:6"}},
		Notes:         []string{"note"},
	}
	base := Target{User: "root", Port: 22, Jump: "bastion", IdentityFiles: []string{"/etc/key"}}
	tests := []struct {
		name          string
		own, defaults Target
		oh            OpenSSHHost
		want          layered
	}{
		{
			name: "ssh config fills what the inventory leaves empty",
			own:  Target{Name: "n1"},
			oh:   oh,
			want: layered{Jump: jumpFromOpenSSH, Hops: []jumpHop{{Host: "hop1"}, {Host: "hop2"}}, Target: Target{
				Name: "n1", Address: "10.0.0.5", Port: 2222, User: "ops", Jump: "hop2",
				ConfigIdentityFiles: []string{"/h/.ssh/k"},
				SSHConfigLines:      []string{"HostName 10.0.0.5 (c:2)", "Port 2222 (c:3)", "User ops (c:4)", "IdentityFile /h/.ssh/k (c:6)", "ProxyJump hop1,hop2 (c:5)", "note"},
			}},
		},
		{
			name:     "the node's fields and the file's defaults win",
			own:      Target{Name: "n1", Address: "192.0.2.1", Jump: "-"},
			defaults: Target{Port: 2200, User: "ubuntu", IdentityFiles: []string{"/inv/key"}},
			oh:       oh,
			want: layered{Jump: jumpNone, Target: Target{
				Name: "n1", Address: "192.0.2.1", Port: 2200, User: "ubuntu", IdentityFiles: []string{"/inv/key"},
				SSHConfigLines: []string{"note"},
			}},
		},
		{
			name: "nothing in ssh config: the config's ssh section",
			own:  Target{Name: "n1", Address: "192.0.2.1"},
			want: layered{Jump: jumpFromBase, Target: Target{
				Name: "n1", Address: "192.0.2.1", Port: 22, User: "root", Jump: "bastion", IdentityFiles: []string{"/etc/key"},
			}},
		},
		{
			name: "ProxyJump none beats the config's ssh.jump",
			own:  Target{Name: "n1", Address: "192.0.2.1"},
			oh:   OpenSSHHost{ProxyJump: Setting{"none", "c:9"}},
			want: layered{Jump: jumpNone, Target: Target{
				Name: "n1", Address: "192.0.2.1", Port: 22, User: "root", IdentityFiles: []string{"/etc/key"},
				SSHConfigLines: []string{"ProxyJump none (c:9)"},
			}},
		},
		{
			name: "a node is not its own jump host",
			own:  Target{Name: "bastion", Address: "192.0.2.1"},
			want: layered{Jump: jumpNone, Target: Target{
				Name: "bastion", Address: "192.0.2.1", Port: 22, User: "root", IdentityFiles: []string{"/etc/key"},
			}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := layerTarget(tc.own, tc.defaults, tc.oh, base)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestAgentSocket(t *testing.T) {
	for _, tc := range []struct{ pool, identityAgent, want string }{
		{"/run/agent", "", "/run/agent"},
		{"/run/agent", "SSH_AUTH_SOCK", "/run/agent"},
		{"/run/agent", "none", ""},
		{"/run/agent", "/home/a/.1password/agent.sock", "/home/a/.1password/agent.sock"},
		{"", "/home/a/agent.sock", "/home/a/agent.sock"},
	} {
		if got := agentSocket(tc.pool, tc.identityAgent); got != tc.want {
			t.Errorf("agentSocket(%q, %q) = %q, want %q", tc.pool, tc.identityAgent, got, tc.want)
		}
	}
}

func TestIdentityFiles(t *testing.T) {
	defaults := DefaultIdentityFiles("/home/a")
	tests := []struct {
		name                  string
		cfg                   Config
		t                     Target
		wantStrict, wantLenie []string
	}{
		{name: "nothing named: the default identities", cfg: Config{DefaultIdentityFiles: defaults}, wantLenie: defaults},
		{name: "ssh config IdentityFile replaces the defaults", cfg: Config{DefaultIdentityFiles: defaults},
			t: Target{ConfigIdentityFiles: []string{"/k"}}, wantLenie: []string{"/k"}},
		{name: "key_files and the inventory's are strict", cfg: Config{IdentityFiles: []string{"/pool"}, DefaultIdentityFiles: defaults},
			t: Target{IdentityFiles: []string{"/inv"}}, wantStrict: []string{"/pool", "/inv"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, l := identityFiles(tc.cfg, tc.t)
			if diff := cmp.Diff(tc.wantStrict, s); diff != "" {
				t.Errorf("strict (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantLenie, l); diff != "" {
				t.Errorf("lenient (-want +got):\n%s", diff)
			}
		})
	}
	want := []string{"/home/a/.ssh/id_rsa", "/home/a/.ssh/id_ecdsa", "/home/a/.ssh/id_ecdsa_sk", "/home/a/.ssh/id_ed25519", "/home/a/.ssh/id_ed25519_sk"}
	if diff := cmp.Diff(want, defaults); diff != "" {
		t.Errorf("DefaultIdentityFiles, OpenSSH's order (-want +got):\n%s", diff)
	}
}

// An inventory node may leave its address to ~/.ssh/config, and a
// ProxyJump hop the inventory does not name becomes an entry of its own.
func TestInventoryWithOpenSSHConfig(t *testing.T) {
	home := writeHome(t, "Host gpu-01\n  HostName 10.1.0.1\n  ProxyJump ops@jump:2222\nHost jump\n  HostName 203.0.113.7\n", map[string]string{})
	cfgPath := DefaultOpenSSHConfig(home)
	oc, err := LoadOpenSSHConfig(cfgPath, home)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := ParseInventoryWith([]byte("nodes:\n  gpu-01: {}\n  cp-1: {address: 10.0.0.1}\n"), Target{User: "root", Port: 22}, oc)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Target{
		"gpu-01": {Name: "gpu-01", Address: "10.1.0.1", Port: 22, User: "root", Jump: "jump",
			SSHConfigLines: []string{"HostName 10.1.0.1 (" + cfgPath + ":2)", "ProxyJump ops@jump:2222 (" + cfgPath + ":3)"}},
		"jump": {Name: "jump", Address: "203.0.113.7", Port: 2222, User: "ops",
			SSHConfigLines: []string{"a ProxyJump hop (" + cfgPath + ":3)", "HostName 203.0.113.7 (" + cfgPath + ":5)"}},
		"cp-1": {Name: "cp-1", Address: "10.0.0.1", Port: 22, User: "root"},
	}
	for name, w := range want {
		got, err := inv.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	if err := inv.SetAddress("gpu-02", "10.9.9.9"); err != nil {
		t.Fatal(err)
	}
	if got, _ := inv.Lookup("gpu-02"); got.Address != "10.9.9.9" || got.Jump != "" {
		t.Errorf("a cluster node ~/.ssh/config does not name: %+v, want the InternalIP, direct", got)
	}
	if _, err := ParseInventoryWith([]byte("nodes:\n  gpu-03: {}\n"), Target{}, oc); err == nil || !strings.Contains(err.Error(), "address is required") {
		t.Errorf("a node with no address anywhere: err = %v", err)
	}
}

// Which configuration a server reads: ssh.openssh_config, else the user's
// ~/.ssh/config when it exists; "none" turns it off.
func TestLoadUserOpenSSHConfig(t *testing.T) {
	home := writeHome(t, "Host a\n  Port 2200\n", map[string]string{"other": "Host a\n  Port 2300\n"})
	bare := t.TempDir()
	tests := []struct {
		name, path, home string
		wantPort         string // "" when nothing is read
		wantErr          string
	}{
		{name: "the user's ~/.ssh/config", home: home, wantPort: "2200"},
		{name: "a file named with ~", path: "~/.ssh/other", home: home, wantPort: "2300"},
		{name: "none", path: "none", home: home},
		{name: "no ~/.ssh/config", home: bare},
		{name: "no home", home: ""},
		{name: "a named file that is missing", path: filepath.Join(bare, "nope"), home: home, wantErr: "no such file"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			oc, err := LoadUserOpenSSHConfig(tc.path, tc.home)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			h, err := oc.Resolve("a")
			if err != nil {
				t.Fatal(err)
			}
			if h.Port.Value != tc.wantPort {
				t.Errorf("Port = %q, want %q", h.Port.Value, tc.wantPort)
			}
		})
	}
}

// BenchmarkInventoryWithOpenSSHConfig: a 1,000-node inventory laid over a
// ~/.ssh/config of 50 Host blocks, against the same inventory alone.
func BenchmarkInventoryWithOpenSSHConfig(b *testing.B) {
	var cfg, inv strings.Builder
	for i := range 50 {
		fmt.Fprintf(&cfg, "Host rack%02d-*\n  User ops\n  Port 22\n  IdentityFile ~/.ssh/rack%02d\n\n", i, i)
	}
	cfg.WriteString("Host *\n  User fallback\n")
	inv.WriteString("nodes:\n")
	for i := range 1000 {
		fmt.Fprintf(&inv, "  rack%02d-gpu-%04d: {address: 10.%d.%d.%d}\n", i%50, i, i/65536, (i/256)%256, i%256)
	}
	home := b.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".ssh"), 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(DefaultOpenSSHConfig(home), []byte(cfg.String()), 0o600); err != nil {
		b.Fatal(err)
	}
	oc, err := LoadOpenSSHConfig(DefaultOpenSSHConfig(home), home)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		oc   *OpenSSHConfig
	}{{"inventory alone", nil}, {"over ssh config", oc}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := ParseInventoryWith([]byte(inv.String()), Target{User: "root", Port: 22}, bc.oc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func TestConfigKeyword(t *testing.T) {
	tests := []struct {
		line, key, rest string
		include         []string
	}{
		{line: "Include conf.d/*", key: "Include", rest: "conf.d/*", include: []string{"conf.d/*"}},
		{line: "  include\t~/a \"b c\"\r\n", key: "include", rest: "~/a \"b c\"", include: []string{"~/a", "b c"}},
		{line: "Include=a b", key: "Include", rest: "a b", include: []string{"a", "b"}},
		{line: "Include = a", key: "Include", rest: "a", include: []string{"a"}},
		{line: "Match\thost x", key: "Match", rest: "host x"},
		{line: "IncludeX a", key: "IncludeX", rest: "a"},
		{line: "# Include a", key: "#", rest: "Include a"},
	}
	for _, tc := range tests {
		key, rest := keyword(tc.line)
		if key != tc.key || rest != tc.rest {
			t.Errorf("keyword(%q) = %q, %q; want %q, %q", tc.line, key, rest, tc.key, tc.rest)
		}
		args, ok := includeArgs(tc.line)
		if ok != (tc.include != nil) {
			t.Errorf("includeArgs(%q) ok = %v", tc.line, ok)
		}
		if diff := cmp.Diff(tc.include, args); ok && diff != "" {
			t.Errorf("includeArgs(%q) (-want +got):\n%s", tc.line, diff)
		}
	}
}

// FuzzOpenSSHConfig: whatever the file holds, reading and resolving it
// neither panics nor names a line the file does not have. (Include lines
// are left out: they read other files.)
func FuzzOpenSSHConfig(f *testing.F) {
	f.Add("Host gpu-*\n  HostName %h.example\n  Port 2222\n  User ops\n  IdentityFile ~/.ssh/id_%n\n  ProxyJump a@b:22,c\n")
	f.Add("Match exec true\n  User x\nHost *\n  ProxyCommand nc %h %p\n")
	f.Add("Host=a\tb\n\tPort=22\n")
	f.Fuzz(func(t *testing.T, config string) {
		if strings.Contains(strings.ToLower(config), "include") {
			t.Skip("Include reads other files")
		}
		home := writeHome(t, config, map[string]string{})
		oc, err := LoadOpenSSHConfig(DefaultOpenSSHConfig(home), home)
		if err != nil {
			return
		}
		h, err := oc.Resolve("gpu-01")
		if err != nil {
			return
		}
		lines := strings.Count(config, "\n") + 1
		for _, s := range append([]Setting{h.HostName, h.Port, h.User, h.ProxyJump}, h.IdentityFiles...) {
			if s.At == "" {
				continue
			}
			_, n, _ := strings.Cut(s.At, DefaultOpenSSHConfig(home)+":")
			if line, err := strconv.Atoi(n); err != nil || line < 1 || line > lines {
				t.Fatalf("setting %+v names line %q of a %d-line file", s, n, lines)
			}
		}
		if _, err := layerTarget(Target{Name: "gpu-01"}, Target{}, h, Target{}); err != nil {
			return
		}
	})
}
