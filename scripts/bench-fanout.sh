#!/bin/sh
# bench-fanout.sh — measure fan-out of a read-only command over real sshd.
#
# Starts N OpenSSH servers on 127.0.0.1 (one shared config, one port each),
# runs `uname -r` on all of them — what fleet_check does per host — at the
# same concurrency with:
#   mcp-patch cold     host.Pool, new connections
#   mcp-patch pooled   the same Pool again: connections already open
#   x/crypto/ssh loop  plain ssh.Dial + session per host, same concurrency
#   parallel-ssh       Debian pssh, ssh per host
#   ansible            ansible -m command (only up to ANSIBLE_MAX hosts)
# and prints wall time and client CPU (user+sys of the client process and
# the children it reaped). The work is BenchmarkFanOut in host/bench_test.go.
#
# Needs: root (sshd logs in as root), openssh-server, pssh, ansible, Go.
# Run by hand:   sh scripts/bench-fanout.sh
# Knobs (environment):
#   HOSTS=50,200        endpoint counts
#   CONCURRENCY=50      parallel hosts
#   ANSIBLE_MAX=50      largest count ansible runs against
# The machine's load average is printed first: wall times on a shared
# machine move with it; client CPU much less.
set -eu

say() { printf 'bench-fanout: %s\n' "$*" >&2; }

repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

for tool in go /usr/sbin/sshd parallel-ssh ansible; do
	command -v "$tool" >/dev/null 2>&1 || { say "missing $tool"; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { say "run as root: the endpoints log in as root"; exit 1; }

say "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"

MCPP_BENCH_HOSTS=${HOSTS:-50,200} \
MCPP_BENCH_CONCURRENCY=${CONCURRENCY:-50} \
MCPP_BENCH_ANSIBLE_MAX=${ANSIBLE_MAX:-50} \
	go test -run '^$' -bench '^BenchmarkFanOut$' -benchtime 1x -timeout 30m ./host/
