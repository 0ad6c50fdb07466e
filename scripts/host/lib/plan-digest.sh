# plan_lines: read `apt-get -s` output, print the canonical package set: one
# line per Inst, Remv or Purg line, "<op> <package> <old> <new> <arch>" with
# "-" for a missing part. plan_digest: sha256 of those lines sorted
# bytewise, each ending in a newline (the Go side computes the same).
plan_lines() {
	LC_ALL=C awk -F '[ \t]+' '
	{ sub(/^[ \t]+/, "") }
	$1 == "Inst" || $1 == "Remv" || $1 == "Purg" {
		old = "-"; new = "-"; arch = "-"; i = 3
		if (i <= NF && $i ~ /^\[.*\]$/) { old = substr($i, 2, length($i) - 2); i++ }
		for (; i <= NF; i++) if (substr($i, 1, 1) == "(") { new = substr($i, 2); i++; break }
		for (; i <= NF; i++) if ($i ~ /^\[.*\]\)$/) { arch = substr($i, 2, length($i) - 3); break }
		if (old == "") old = "-"
		if (new == "") new = "-"
		if (arch == "") arch = "-"
		print $1 " " $2 " " old " " new " " arch
	}'
}
plan_digest() { plan_lines | LC_ALL=C sort | sha256sum | sed 's/ .*//; s/^/sha256:/'; }
