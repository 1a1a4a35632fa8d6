//go:build tools

// Package tools pins what scripts/kube builds: etcd's server (its main is the module
// root of go.etcd.io/etcd/server/v3, which calls etcdmain), at the version go.mod requires.
package tools

import (
	_ "go.etcd.io/etcd/server/v3/etcdmain"
)
