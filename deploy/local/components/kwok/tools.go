//go:build tools

// Package components pins the kwok node simulator the local fleet builds.
package components

import _ "sigs.k8s.io/kwok/cmd/kwok"
