// Command etcd is the etcd server of the test cluster: etcd's own main, from the
// go.etcd.io/etcd/server/v3 module the pinned Kubernetes release requires, so the
// cluster's three components build from one go.sum.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
