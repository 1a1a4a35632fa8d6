//go:build tools

// Package tools pins what scripts/kube builds: kube-apiserver and kubectl of
// k8s.io/kubernetes, at the versions go.mod requires.
package tools

import (
	_ "k8s.io/kubectl/pkg/cmd"
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
)
