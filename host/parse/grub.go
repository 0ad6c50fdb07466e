package parse

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// GrubEntry is one bootable menu entry of a generated grub.cfg.
type GrubEntry struct {
	// ID is the full id path GRUB's "default" and grub-reboot take:
	// "<submenu id>><entry id>" inside a submenu, "<entry id>" at the top.
	// An entry without an id is named by its title, as GRUB also matches
	// titles.
	ID string `json:"id"`
	// IndexPath is the same entry by position, e.g. "1>2".
	IndexPath string `json:"index_path"`
	// Title is the title path, e.g. "Advanced options for Ubuntu>Ubuntu,
	// with Linux 5.15.0-86-generic".
	Title string `json:"title"`
	// Kernel is the kernel release of the entry's first linux line
	// (/boot/vmlinuz-<release>); empty when it boots something else.
	Kernel string `json:"kernel,omitempty"`
	// Recovery is true for "(recovery mode)" entries.
	Recovery bool `json:"recovery"`
	// Submenu is the id of the enclosing submenu, empty at the top level.
	Submenu string `json:"submenu,omitempty"`
}

// GrubMenu is what a generated grub.cfg offers.
type GrubMenu struct {
	Entries []GrubEntry `json:"entries"`
	// Submenus are the top-level submenu ids (and nested ones as paths).
	Submenus []string `json:"submenus"`
	// Default is the value of `set default="..."` used when no next_entry
	// is set: "0", an id path, a title, or "${saved_entry}".
	Default string `json:"default"`
	// HonoursNextEntry is true when the header boots next_entry once and
	// clears it (the mechanism grub-reboot relies on).
	HonoursNextEntry bool `json:"honours_next_entry"`
	// LacksWriteSupport holds grub-mkconfig's own note ("GRUB lacks write
	// support for lvm, ...") when it found /boot/grub on an abstraction GRUB
	// cannot write; empty otherwise.
	LacksWriteSupport string `json:"lacks_write_support,omitempty"`
}

// Entry returns the entry with the given id path.
func (m GrubMenu) Entry(id string) (GrubEntry, bool) {
	for _, e := range m.Entries {
		if e.ID == id {
			return e, true
		}
	}
	return GrubEntry{}, false
}

var (
	grubSetDefault = regexp.MustCompile(`^\s*set default="(.*)"\s*$`)
	grubLinuxLine  = regexp.MustCompile(`^linux(16|efi)?[ \t]`)
)

// grubWord reads one shell-like word of a menuentry line: quoted pieces
// ('…' and "…" with backslash escapes) and bare characters concatenate,
// blanks end it. It returns the word and the rest of the line. It mirrors
// the awk function word() in scripts/host/trial_boot.sh.
func grubWord(s string) (string, string) {
	var out strings.Builder
	for s != "" {
		c := s[0]
		switch {
		case c == ' ' || c == '\t':
			return out.String(), s
		case c == '\'':
			q := strings.IndexByte(s[1:], '\'')
			if q < 0 {
				out.WriteString(s[1:])
				return out.String(), ""
			}
			out.WriteString(s[1 : 1+q])
			s = s[q+2:]
		case c == '"':
			s = s[1:]
			for s != "" && s[0] != '"' {
				if s[0] == '\\' && len(s) > 1 {
					s = s[1:]
				}
				out.WriteByte(s[0])
				s = s[1:]
			}
			if s != "" {
				s = s[1:]
			}
		case c == '\\':
			if len(s) > 1 {
				out.WriteByte(s[1])
				s = s[2:]
			} else {
				s = ""
			}
		default:
			out.WriteByte(c)
			s = s[1:]
		}
	}
	return out.String(), ""
}

func trimBlanksLeft(s string) string { return strings.TrimLeft(s, " \t") }

type grubFrame struct {
	kind                 string // "submenu", "menuentry", "block"
	idPath, ipath, tpath string
}

// ParseGrubCfg reads a grub.cfg written by grub-mkconfig: menu entries with
// their full id paths (submenu nesting followed by braces), kernels, the
// default and the header features. It follows the same rules as
// grub_entries in the scripts, so ids agree on both sides. A hand-written
// grub.cfg with braces on other lines than the entry's own may be misread;
// an unbalanced "}" is ignored.
func ParseGrubCfg(cfg string) GrubMenu {
	var m GrubMenu
	var stack []grubFrame
	counts := []int{0} // entries seen per submenu nesting level
	// The entry whose body is being read; like the scripts' awk, an entry
	// is recorded when its closing brace is seen.
	var cur GrubEntry
	inEntry := false
	for _, raw := range strings.Split(cfg, "\n") {
		line := strings.TrimRight(raw, " \t\r")
		t := trimBlanksLeft(line)
		if strings.Contains(t, "GRUB lacks write support") && m.LacksWriteSupport == "" {
			m.LacksWriteSupport = strings.TrimLeft(t, "# ")
		}
		if sm := grubSetDefault.FindStringSubmatch(line); sm != nil {
			if sm[1] == "${next_entry}" {
				m.HonoursNextEntry = true
			} else if m.Default == "" {
				m.Default = sm[1]
			}
		}
		kind := ""
		if strings.HasPrefix(t, "menuentry ") || strings.HasPrefix(t, "menuentry\t") {
			kind = "menuentry"
		} else if strings.HasPrefix(t, "submenu ") || strings.HasPrefix(t, "submenu\t") {
			kind = "submenu"
		}
		if kind != "" {
			s := trimBlanksLeft(t[len(kind):])
			title, id := "", ""
			for n := 0; s != "" && s[0] != '{'; n++ {
				var w string
				w, s = grubWord(s)
				s = trimBlanksLeft(s)
				if n == 0 {
					title = w
					continue
				}
				switch {
				case w == "$menuentry_id_option" || w == "--id":
					id, s = grubWord(s)
					s = trimBlanksLeft(s)
				case strings.HasPrefix(w, "--id="):
					id = w[5:]
				}
			}
			if id == "" {
				id = title
			}
			level := len(counts) - 1
			idx := counts[level]
			counts[level]++
			parentID, parentI, parentT, parent := "", "", "", ""
			for i := len(stack) - 1; i >= 0; i-- {
				if stack[i].kind == "submenu" {
					parent = stack[i].idPath
					parentID, parentI, parentT = stack[i].idPath+">", stack[i].ipath+">", stack[i].tpath+">"
					break
				}
			}
			e := GrubEntry{
				ID: parentID + id, IndexPath: parentI + strconv.Itoa(idx), Title: parentT + title,
				Submenu: parent, Recovery: strings.Contains(title, "(recovery mode)"),
			}
			if !strings.HasSuffix(t, "{") {
				if kind == "menuentry" {
					m.Entries = append(m.Entries, e)
				}
				continue
			}
			if kind == "submenu" {
				stack = append(stack, grubFrame{kind: "submenu", idPath: e.ID, ipath: e.IndexPath, tpath: e.Title})
				counts = append(counts, 0)
				m.Submenus = append(m.Submenus, e.ID)
			} else {
				stack = append(stack, grubFrame{kind: "menuentry"})
				cur, inEntry = e, true
			}
			continue
		}
		if t == "}" {
			if n := len(stack); n > 0 {
				switch stack[n-1].kind {
				case "submenu":
					counts = counts[:len(counts)-1]
				case "menuentry":
					m.Entries = append(m.Entries, cur)
					inEntry = false
				}
				stack = stack[:n-1]
			}
			continue
		}
		if inEntry && cur.Kernel == "" && grubLinuxLine.MatchString(t) {
			s := trimBlanksLeft(t[strings.IndexAny(t, " \t"):])
			p, _ := grubWord(s)
			if i := strings.LastIndexByte(p, '/'); i >= 0 {
				p = p[i+1:]
			}
			if strings.HasPrefix(p, "vmlinuz-") || strings.HasPrefix(p, "vmlinux-") {
				cur.Kernel = p[len("vmlinuz-"):]
			}
			continue
		}
		if strings.HasSuffix(t, "{") {
			stack = append(stack, grubFrame{kind: "block"})
		}
	}
	return m
}

// GrubEnvSize is the size of a grubenv block; GRUB reads and writes it in
// place and never grows it.
const GrubEnvSize = 1024

const grubEnvHeader = "# GRUB Environment Block\n"

// GrubEnv is a parsed grubenv file.
type GrubEnv struct {
	Vars map[string]string `json:"vars"`
	// Order keeps the variables in file order.
	Order []string `json:"order"`
	// Size is the byte size of the file; GRUB expects GrubEnvSize.
	Size int `json:"size"`
}

// Get returns a variable ("" when unset).
func (e GrubEnv) Get(name string) string { return e.Vars[name] }

// ParseGrubEnv reads a grubenv block: the header line, NAME=VALUE lines
// (GRUB escapes '\\' and newline with a backslash) and '#' padding. It
// fails on a missing header, a block that is not 1024 bytes, or a line
// without '='.
func ParseGrubEnv(data []byte) (GrubEnv, error) {
	env := GrubEnv{Vars: map[string]string{}, Size: len(data)}
	s := string(data)
	if !strings.HasPrefix(s, grubEnvHeader) {
		return env, errors.New("grubenv: missing \"# GRUB Environment Block\" header")
	}
	if len(data) != GrubEnvSize {
		return env, fmt.Errorf("grubenv: block is %d bytes, GRUB needs exactly %d", len(data), GrubEnvSize)
	}
	body := s[len(grubEnvHeader):]
	for len(body) > 0 {
		if body[0] == '#' {
			// A comment line or the padding: skip to the end of the line.
			i := strings.IndexByte(body, '\n')
			if i < 0 {
				break
			}
			body = body[i+1:]
			continue
		}
		// Read up to an unescaped newline.
		var line strings.Builder
		i := 0
		for ; i < len(body) && body[i] != '\n'; i++ {
			if body[i] == '\\' && i+1 < len(body) {
				i++
			}
			line.WriteByte(body[i])
		}
		if i >= len(body) {
			return env, errors.New("grubenv: variable line without a newline")
		}
		body = body[i+1:]
		l := line.String()
		eq := strings.IndexByte(l, '=')
		if eq <= 0 {
			return env, fmt.Errorf("grubenv: line %q is not NAME=VALUE", l)
		}
		name := l[:eq]
		if _, seen := env.Vars[name]; !seen {
			env.Order = append(env.Order, name)
		}
		env.Vars[name] = l[eq+1:]
	}
	return env, nil
}

// BootTarget is what GRUB will boot next and why.
type BootTarget struct {
	// Source is "next_entry" (a one-shot from grub-reboot), "saved_entry"
	// (GRUB_DEFAULT=saved) or "default" (grub.cfg's own default).
	Source string `json:"source"`
	// Value is the raw default string GRUB resolves.
	Value string    `json:"value"`
	Entry GrubEntry `json:"entry"`
}

// ErrUnresolved is returned when a default names no bootable entry.
var ErrUnresolved = errors.New("grub default names no menu entry")

// NextBoot works out what GRUB boots next from the menu and its env, as the
// grub-mkconfig header does: next_entry when set (and the header honours
// it), else the default, where "${saved_entry}" is read from grubenv and an
// empty value means the first entry.
func NextBoot(m GrubMenu, env GrubEnv) (BootTarget, error) {
	t := BootTarget{Source: "default", Value: m.Default}
	if ne := env.Get("next_entry"); ne != "" && m.HonoursNextEntry {
		t.Source, t.Value = "next_entry", ne
	} else if m.Default == "${saved_entry}" {
		t.Source, t.Value = "saved_entry", env.Get("saved_entry")
	}
	if t.Value == "" {
		t.Value = "0"
	}
	e, err := m.Resolve(t.Value)
	if err != nil {
		return t, err
	}
	t.Entry = e
	return t, nil
}

// Resolve finds the entry a GRUB default value names. Each '>'-separated
// part is matched at its menu level by position, id or title (GRUB accepts
// all three, also mixed).
func (m GrubMenu) Resolve(value string) (GrubEntry, error) {
	if value == "" {
		return GrubEntry{}, fmt.Errorf("%w: empty", ErrUnresolved)
	}
	parts := strings.Split(value, ">")
	// Walk levels: at each level the candidates are the items (entries and
	// submenus) whose parent path is the one matched so far.
	type item struct {
		id, title, ipath string
		entry            *GrubEntry
	}
	levelItems := func(parentIPath string) []item {
		var items []item
		seen := map[string]bool{}
		add := func(ipath, id, title string, e *GrubEntry) {
			if !seen[ipath] {
				seen[ipath] = true
				items = append(items, item{id: id, title: title, ipath: ipath, entry: e})
			}
		}
		for i := range m.Entries {
			e := &m.Entries[i]
			ip := strings.Split(e.IndexPath, ">")
			ids := strings.Split(e.ID, ">")
			ts := strings.Split(e.Title, ">")
			var pp []string
			if parentIPath != "" {
				pp = strings.Split(parentIPath, ">")
			}
			if len(ip) <= len(pp) || strings.Join(ip[:len(pp)], ">") != parentIPath {
				continue
			}
			d := len(pp)
			if d >= len(ids) || d >= len(ts) {
				continue
			}
			var ent *GrubEntry
			if len(ip) == d+1 {
				ent = e
			}
			add(strings.Join(ip[:d+1], ">"), ids[d], ts[d], ent)
		}
		return items
	}
	parent := ""
	for i, p := range parts {
		// As GRUB does: a number is a position; anything else an id or a
		// title.
		n, numErr := strconv.ParseUint(p, 10, 32)
		isNum := numErr == nil && strings.Trim(p, "0123456789") == ""
		var found *item
		for _, it := range levelItems(parent) {
			last := it.ipath[strings.LastIndexByte(it.ipath, '>')+1:]
			if (isNum && strconv.FormatUint(n, 10) == last) || (!isNum && (p == it.id || p == it.title)) {
				found = &it
				break
			}
		}
		if found == nil {
			return GrubEntry{}, fmt.Errorf("%w: %q (no item %q)", ErrUnresolved, value, p)
		}
		if i == len(parts)-1 {
			if found.entry == nil {
				return GrubEntry{}, fmt.Errorf("%w: %q is a submenu", ErrUnresolved, value)
			}
			return *found.entry, nil
		}
		parent = found.ipath
	}
	return GrubEntry{}, fmt.Errorf("%w: %q", ErrUnresolved, value)
}

// GrubDefaults is what /etc/default/grub and its grub.d/*.cfg drop-ins set
// (later files win, as grub-mkconfig sources them in that order).
type GrubDefaults struct {
	Default        string `json:"default"`
	CmdlineLinux   string `json:"cmdline_linux"`
	CmdlineDefault string `json:"cmdline_linux_default"`
	DisableSubmenu string `json:"disable_submenu,omitempty"`
	SaveDefault    string `json:"savedefault,omitempty"`
	DefaultSetBy   string `json:"default_set_by,omitempty"`
}

// GrubDefaultsFile is one sourced file.
type GrubDefaultsFile struct {
	Path    string `json:"path"`
	Content string `json:"content"`
}

var grubAssign = regexp.MustCompile(`^\s*(?:export\s+)?(GRUB_[A-Z_]+)=(.*)$`)

// ParseGrubDefaults reads simple assignments of the GRUB_ variables the
// trial boot cares about. Values are unquoted ('…', "…" or bare);
// "$GRUB_CMDLINE_LINUX_DEFAULT" inside a value is expanded with the value
// so far, as the trial-boot drop-in relies on. Command substitutions are
// kept as written.
func ParseGrubDefaults(files []GrubDefaultsFile) GrubDefaults {
	var d GrubDefaults
	vars := map[string]string{}
	for _, f := range files {
		for _, line := range strings.Split(f.Content, "\n") {
			mm := grubAssign.FindStringSubmatch(line)
			if mm == nil {
				continue
			}
			v, _ := grubWord(strings.TrimSpace(mm[2]))
			for _, ref := range []string{"GRUB_CMDLINE_LINUX_DEFAULT", "GRUB_CMDLINE_LINUX"} {
				v = strings.ReplaceAll(v, "${"+ref+"}", vars[ref])
				v = strings.ReplaceAll(v, "$"+ref, vars[ref])
			}
			vars[mm[1]] = v
			if mm[1] == "GRUB_DEFAULT" {
				d.DefaultSetBy = f.Path
			}
		}
	}
	d.Default = vars["GRUB_DEFAULT"]
	d.CmdlineLinux = vars["GRUB_CMDLINE_LINUX"]
	d.CmdlineDefault = vars["GRUB_CMDLINE_LINUX_DEFAULT"]
	d.DisableSubmenu = vars["GRUB_DISABLE_SUBMENU"]
	d.SaveDefault = vars["GRUB_SAVEDEFAULT"]
	return d
}
