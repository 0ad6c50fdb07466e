// Command etcd is the etcd server and etcdctl of the lab control plane in one
// binary, built from go.etcd.io/etcd at the version this module pins, so the
// lab does not depend on whatever etcd the host carries. It runs as etcdctl
// when invoked under that name (the build script links bin/etcdctl to it),
// or as `etcd etcdctl ARGS...`; otherwise it is the etcd server.
package main

import (
	"os"
	"path/filepath"

	"go.etcd.io/etcd/etcdctl/v3/ctlv3"
	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "etcdctl" {
		os.Args = os.Args[1:]
	}
	if filepath.Base(os.Args[0]) == "etcdctl" {
		ctlv3.MustStart()
		return
	}
	etcdmain.Main(os.Args)
}
