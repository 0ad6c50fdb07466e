package host

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/kevinburke/ssh_config"
)

// OpenSSHConfig is an OpenSSH client configuration (~/.ssh/config and what
// it includes), read with github.com/kevinburke/ssh_config. The inventory
// takes HostName, Port, User, IdentityFile, IdentityAgent and ProxyJump
// from it for what the inventory itself leaves unsaid, the way ssh(1)
// would for `ssh NODE`.
// Match blocks and ProxyCommand are not applied: Resolve names their lines
// in its notes.
type OpenSSHConfig struct {
	home string
	root *sshConfigFile
}

// sshConfigFile is one parsed file; includes maps the line of each Include
// directive to the files it brought in, in the order they apply.
type sshConfigFile struct {
	path     string
	cfg      *ssh_config.Config
	includes map[int][]*sshConfigFile
	// matches are the Match lines, each noted, never applied.
	matches []string
}

// maxIncludeDepth bounds nested Include directives (OpenSSH allows 16).
const maxIncludeDepth = 16

// DefaultOpenSSHConfig is the user's client configuration under home.
func DefaultOpenSSHConfig(home string) string { return filepath.Join(home, ".ssh", "config") }

// LoadUserOpenSSHConfig is the OpenSSH client configuration a server run
// by the user whose home is home reads: path, or ~/.ssh/config when path is
// empty (nothing when that file does not exist, or home is unknown); "none"
// reads nothing. A path named that cannot be read is an error.
func LoadUserOpenSSHConfig(path, home string) (*OpenSSHConfig, error) {
	switch {
	case path == "none":
		return nil, nil
	case path != "":
		if !filepath.IsAbs(path) && (path == "~" || strings.HasPrefix(path, "~/")) {
			path = filepath.Join(home, strings.TrimPrefix(path[1:], "/"))
		}
		return LoadOpenSSHConfig(path, home)
	case home == "":
		return nil, nil
	}
	c, err := LoadOpenSSHConfig(DefaultOpenSSHConfig(home), home)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return c, err
}

// LoadOpenSSHConfig reads the OpenSSH client configuration at path. home is
// the user's home directory: "~" and relative Include paths are resolved
// against it (never the process's own), as ssh(1) would for that user. A
// missing file is an error wrapping fs.ErrNotExist; a file that does not
// parse, or an Include that cannot be read, is an error naming its line.
func LoadOpenSSHConfig(path, home string) (*OpenSSHConfig, error) {
	if home == "" {
		return nil, errors.New("read ssh config: no home directory to resolve ~ against")
	}
	root, err := parseSSHConfigFile(path, home, 0)
	if err != nil {
		return nil, err
	}
	return &OpenSSHConfig{home: home, root: root}, nil
}

// parseSSHConfigFile parses one file. Include lines are taken out before the
// parser sees them (it would resolve them against the process's own home)
// and read here against home; each stays as a comment on its line, so the
// parser's line numbers are the file's.
func parseSSHConfigFile(path, home string, depth int) (*sshConfigFile, error) {
	if depth > maxIncludeDepth {
		return nil, fmt.Errorf("read ssh config %s: more than %d nested Include directives", path, maxIncludeDepth)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read ssh config: %w", err)
	}
	lines := strings.SplitAfter(string(data), "\n")
	f := &sshConfigFile{path: path, includes: map[int][]*sshConfigFile{}}
	for i, line := range lines {
		if isMatchLine(line) {
			// The parser refuses Match criteria it lacks (exec, user...):
			// a block that never applies keeps the lines under it out.
			f.matches = append(f.matches, fmt.Sprintf("%q at %s:%d is not applied (Match blocks are not read; use Host)", strings.TrimSpace(line), path, i+1))
			lines[i] = "Host !*\n"
			continue
		}
		args, ok := includeArgs(line)
		if !ok {
			continue
		}
		lines[i] = "#" + line
		var files []*sshConfigFile
		for _, pattern := range args {
			matches, err := filepath.Glob(includePath(pattern, home))
			if err != nil {
				return nil, fmt.Errorf("read ssh config %s:%d: Include %s: %w", path, i+1, pattern, err)
			}
			for _, m := range matches {
				inc, err := parseSSHConfigFile(m, home, depth+1)
				if err != nil {
					return nil, fmt.Errorf("%s:%d: Include: %w", path, i+1, err)
				}
				files = append(files, inc)
			}
		}
		f.includes[i+1] = files
	}
	cfg, err := ssh_config.DecodeBytes([]byte(strings.Join(lines, "")))
	if err != nil {
		return nil, fmt.Errorf("parse ssh config %s: %w", path, err)
	}
	f.cfg = cfg
	return f, nil
}

// keyword splits a config line into its keyword and the rest, as
// ssh_config(5) separates them: white space or one "=" (with white space
// around it).
func keyword(line string) (key, rest string) {
	s := strings.TrimSpace(line)
	end := strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || r == '=' })
	if end < 0 {
		return s, ""
	}
	rest = strings.TrimSpace(s[end:])
	rest = strings.TrimSpace(strings.TrimPrefix(rest, "="))
	return s[:end], rest
}

// isMatchLine says whether line starts a Match block.
func isMatchLine(line string) bool {
	key, _ := keyword(line)
	return strings.EqualFold(key, "match")
}

// includeArgs returns the paths of an Include line ("Include a b",
// "Include=a"), and whether line is one.
func includeArgs(line string) ([]string, bool) {
	key, rest := keyword(line)
	if !strings.EqualFold(key, "include") {
		return nil, false
	}
	return splitArgs(rest), true
}

// splitArgs splits at white space outside double quotes and drops the
// quotes, as ssh reads a path list ("Include a \"b c\"" is a and b c).
func splitArgs(s string) []string {
	var args []string
	var cur strings.Builder
	quoted, started := false, false
	for _, r := range s {
		switch {
		case r == '"':
			quoted, started = !quoted, true
		case unicode.IsSpace(r) && !quoted:
			if started {
				args = append(args, cur.String())
				cur.Reset()
				started = false
			}
		default:
			cur.WriteRune(r)
			started = true
		}
	}
	if started {
		args = append(args, cur.String())
	}
	return args
}

// includePath is where an Include path points, as ssh_config(5) says for a
// user's file: "~" is home, and a relative path is under ~/.ssh.
func includePath(p, home string) string {
	switch {
	case p == "~":
		return home
	case strings.HasPrefix(p, "~/"):
		return filepath.Join(home, p[2:])
	case filepath.IsAbs(p):
		return p
	}
	return filepath.Join(home, ".ssh", p)
}

// Setting is one value the OpenSSH configuration gave, and where.
type Setting struct {
	Value string
	// At is "file:line" of the line it came from.
	At string
}

// OpenSSHHost is what the OpenSSH configuration says for one alias: the
// first value of each keyword (as ssh(1) takes it), every IdentityFile, and
// notes on lines that apply but are not followed.
type OpenSSHHost struct {
	HostName      Setting
	Port          Setting
	User          Setting
	ProxyJump     Setting
	IdentityFiles []Setting
	// IdentityAgent is the agent socket for this host: a path, "none", or
	// "SSH_AUTH_SOCK" (the environment's).
	IdentityAgent Setting
	Notes         []string
}

// Resolve says what the configuration gives alias (a node name), with "~"
// and the %-tokens of IdentityFile and HostName expanded. A token it does
// not know, or a Port that is not a number, is an error naming its line.
func (c *OpenSSHConfig) Resolve(alias string) (OpenSSHHost, error) {
	var h OpenSSHHost
	if c == nil {
		return h, nil
	}
	c.root.collect(alias, &h)
	var err error
	if h.HostName.Value != "" {
		if h.HostName.Value, err = expandTokens(h.HostName.Value, map[byte]string{'h': alias, 'n': alias}); err != nil {
			return OpenSSHHost{}, fmt.Errorf("ssh config %s: HostName: %w", h.HostName.At, err)
		}
	}
	if h.Port.Value != "" {
		if n, err := strconv.Atoi(h.Port.Value); err != nil || n < 1 || n > 65535 {
			return OpenSSHHost{}, fmt.Errorf("ssh config %s: Port %q is not a port number", h.Port.At, h.Port.Value)
		}
	}
	hostName := cmp.Or(h.HostName.Value, alias)
	tokens := map[byte]string{'d': c.home, 'h': hostName, 'n': alias, 'p': cmp.Or(h.Port.Value, strconv.Itoa(DefaultPort)), 'r': h.User.Value}
	for i, f := range h.IdentityFiles {
		if h.IdentityFiles[i].Value, err = c.expandPath(f, tokens); err != nil {
			return OpenSSHHost{}, fmt.Errorf("ssh config %s: IdentityFile: %w", f.At, err)
		}
	}
	switch a := h.IdentityAgent; {
	case a.Value == "", a.Value == "none", a.Value == "SSH_AUTH_SOCK":
	case strings.HasPrefix(a.Value, "$"):
		return OpenSSHHost{}, fmt.Errorf("ssh config %s: IdentityAgent %s: environment variables other than SSH_AUTH_SOCK are not read; name the socket's path", a.At, a.Value)
	default:
		if h.IdentityAgent.Value, err = c.expandPath(a, tokens); err != nil {
			return OpenSSHHost{}, fmt.Errorf("ssh config %s: IdentityAgent: %w", a.At, err)
		}
	}
	return h, nil
}

// expandPath is a path setting with "~" and the %-tokens expanded; a
// relative one is under ~/.ssh (ssh(1) would read it from its working
// directory, and a server has none worth meaning).
func (c *OpenSSHConfig) expandPath(s Setting, tokens map[byte]string) (string, error) {
	v := s.Value
	if v == "~" || strings.HasPrefix(v, "~/") {
		v = filepath.Join(c.home, strings.TrimPrefix(v[1:], "/"))
	}
	v, err := expandTokens(v, tokens)
	if err != nil {
		return "", err
	}
	if !filepath.IsAbs(v) {
		v = filepath.Join(c.home, ".ssh", v)
	}
	return v, nil
}

// collect walks the file's blocks in order for alias, keeping the first
// value of each keyword and descending into the Include lines of matching
// blocks where they stand.
func (f *sshConfigFile) collect(alias string, h *OpenSSHHost) {
	h.Notes = append(h.Notes, f.matches...)
	for _, block := range f.cfg.Hosts {
		if !block.Matches(alias) {
			continue
		}
		for _, node := range block.Nodes {
			switch n := node.(type) {
			case *ssh_config.KV:
				h.set(n.Key, n.Value, fmt.Sprintf("%s:%d", f.path, n.Pos().Line))
			case *ssh_config.Empty:
				for _, inc := range f.includes[n.Pos().Line] {
					inc.collect(alias, h)
				}
			}
		}
	}
}

func (h *OpenSSHHost) set(key, value, at string) {
	first := func(s *Setting) {
		if s.At == "" {
			*s = Setting{Value: value, At: at}
		}
	}
	switch strings.ToLower(key) {
	case "hostname":
		first(&h.HostName)
	case "port":
		first(&h.Port)
	case "user":
		first(&h.User)
	case "proxyjump":
		first(&h.ProxyJump)
	case "identityagent":
		first(&h.IdentityAgent)
	case "identityfile":
		if !slices.ContainsFunc(h.IdentityFiles, func(s Setting) bool { return s.Value == value }) {
			h.IdentityFiles = append(h.IdentityFiles, Setting{Value: value, At: at})
		}
	case "proxycommand":
		h.Notes = append(h.Notes, fmt.Sprintf("ProxyCommand at %s is not followed (use ProxyJump, or jump in the inventory)", at))
	}
}

// expandTokens replaces the %-tokens of ssh_config(5) that tokens names
// ("%%" is "%"); any other token is an error.
func expandTokens(s string, tokens map[byte]string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return "", fmt.Errorf("%q ends with a lone %%", s)
		}
		i++
		if s[i] == '%' {
			b.WriteByte('%')
			continue
		}
		v, ok := tokens[s[i]]
		if !ok {
			return "", fmt.Errorf("token %%%c in %q is not supported here", s[i], s)
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

// jumpHop is one hop of a ProxyJump value.
type jumpHop struct {
	User, Host string
	Port       int
}

// parseProxyJump reads a ProxyJump value: "none", or hops
// "[user@]host[:port]" separated by commas, the first dialled first.
func parseProxyJump(v string) ([]jumpHop, error) {
	if strings.EqualFold(v, "none") {
		return nil, nil
	}
	var hops []jumpHop
	for _, spec := range strings.Split(v, ",") {
		spec = strings.TrimPrefix(strings.TrimSpace(spec), "ssh://")
		var hop jumpHop
		if u, rest, ok := strings.Cut(spec, "@"); ok {
			hop.User, spec = u, rest
		}
		hop.Host = spec
		if h, p, ok := strings.Cut(spec, ":"); ok {
			n, err := strconv.Atoi(p)
			if err != nil || n < 1 || n > 65535 {
				return nil, fmt.Errorf("ProxyJump %q: port %q is not a port number", v, p)
			}
			hop.Host, hop.Port = h, n
		}
		if err := ValidateNodeName(hop.Host); err != nil {
			return nil, fmt.Errorf("ProxyJump %q: host: %w", v, err)
		}
		hops = append(hops, hop)
	}
	return hops, nil
}
