//go:build tools

// Package components pins the etcd server the local fleet builds.
package components

import _ "go.etcd.io/etcd/server/v3"
