// Command etcd is etcd's own server main, built from the Go module proxy so
// that the Kubernetes integration tests run a real etcd without downloads
// from elsewhere.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
