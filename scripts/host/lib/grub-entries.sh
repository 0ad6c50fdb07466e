# grub_entries FILE: one line per bootable menu entry of a generated grub.cfg:
#   <id path> TAB <index path> TAB <kernel version> TAB <title path>
# Paths join submenu and entry with '>' exactly as GRUB's "default" and
# grub-reboot expect them. An entry without an id is named by its title.
grub_entries() {
	LC_ALL=C awk '
	function word(s,    out, c, q) {
		out = ""
		while (s != "") {
			c = substr(s, 1, 1)
			if (c == " " || c == "\t") break
			if (c == "'\''") {
				q = index(substr(s, 2), "'\''")
				if (q == 0) { out = out substr(s, 2); s = ""; break }
				out = out substr(s, 2, q - 1); s = substr(s, q + 2)
			} else if (c == "\"") {
				s = substr(s, 2)
				while (s != "" && substr(s, 1, 1) != "\"") {
					if (substr(s, 1, 1) == "\\" && length(s) > 1) s = substr(s, 2)
					out = out substr(s, 1, 1); s = substr(s, 2)
				}
				s = substr(s, 2)
			} else if (c == "\\") {
				out = out substr(s, 2, 1); s = substr(s, 3)
			} else {
				out = out c; s = substr(s, 2)
			}
		}
		rest = s
		return out
	}
	function skipws(s) { sub(/^[ \t]+/, "", s); return s }
	BEGIN { depth = 0; sub_depth = 0; in_entry = 0 }
	{
		line = $0
		sub(/[ \t\r]+$/, "", line)
		t = skipws(line)
	}
	t ~ /^(menuentry|submenu)[ \t]/ {
		kind = (substr(t, 1, 1) == "m") ? "menuentry" : "submenu"
		s = skipws(substr(t, length(kind) + 1))
		title = ""; id = ""; n = 0
		while (s != "" && substr(s, 1, 1) != "{") {
			w = word(s); s = skipws(rest)
			if (n++ == 0) { title = w; continue }
			if (w == "$menuentry_id_option" || w == "--id") { id = word(s); s = skipws(rest) }
			else if (substr(w, 1, 5) == "--id=") id = substr(w, 6)
		}
		if (id == "") id = title
		idx = count[sub_depth]++
		ipath = (sub_depth ? sub_ipath[sub_depth] ">" : "") idx
		idpath = (sub_depth ? sub_idpath[sub_depth] ">" : "") id
		tpath = (sub_depth ? sub_tpath[sub_depth] ">" : "") title
		if (t !~ /\{$/) {
			if (kind == "menuentry") printf "%s\t%s\t\t%s\n", idpath, ipath, tpath
			next
		}
		if (kind == "submenu") {
			sub_depth++
			count[sub_depth] = 0
			sub_ipath[sub_depth] = ipath; sub_idpath[sub_depth] = idpath; sub_tpath[sub_depth] = tpath
			stack[++depth] = "submenu"
		} else {
			stack[++depth] = "menuentry"
			in_entry = 1; e_id = idpath; e_idx = ipath; e_title = tpath; e_kernel = ""
		}
		next
	}
	t == "}" {
		if (depth > 0) {
			if (stack[depth] == "submenu") sub_depth--
			else if (stack[depth] == "menuentry") {
				printf "%s\t%s\t%s\t%s\n", e_id, e_idx, e_kernel, e_title
				in_entry = 0
			}
			depth--
		}
		next
	}
	in_entry && e_kernel == "" && t ~ /^linux(16|efi)?[ \t]/ {
		s = t
		sub(/^linux(16|efi)?[ \t]+/, "", s)
		p = word(s)
		sub(/.*\//, "", p)
		if (p ~ /^vmlinu[xz]-/) e_kernel = substr(p, 9)
		next
	}
	t ~ /\{$/ { stack[++depth] = "block" }
	' "$1"
}
