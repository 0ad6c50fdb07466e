// Package parse turns what the host-side scripts print (and the raw tool
// output they embed: apt-get, grub.cfg and grubenv, nvidia-smi, bonding,
// ibstat and sysfs, rdma, canonical-livepatch, apt-config, reboot-required,
// needrestart) into typed values.
//
// It owns only pure functions over bytes and strings: no I/O, no exec, no
// clock. Parsers never panic; input they cannot read gives an error or an
// empty result, as each function documents. It must not decide policy (what
// blocks a round): callers do that with the facts it returns.
package parse
