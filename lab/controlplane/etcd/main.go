// Command etcd is the etcd server of the lab control plane: the upstream
// etcd entry point, built from go.etcd.io/etcd/server/v3 at the version this
// module pins, so the lab does not depend on whatever etcd the host carries.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
