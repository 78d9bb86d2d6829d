//go:build tools

// Package tools names the programs this module builds, so that `go mod tidy` keeps their
// dependencies. Nothing imports it.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver/app"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	_ "k8s.io/kubernetes/cmd/kube-scheduler/app"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
