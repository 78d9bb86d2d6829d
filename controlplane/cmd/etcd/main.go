// Command etcd is etcd's own server main, built at the version kube-apiserver's client expects.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
