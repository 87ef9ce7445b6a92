//go:build tools

// Package cluster pins the Gateway API module whose CRD files (config/crd/standard and
// config/crd/experimental) the test cluster applies: a blank import keeps it in go.mod,
// so `go mod download -json sigs.k8s.io/gateway-api` names the very version go.sum checks.
package cluster

import _ "sigs.k8s.io/gateway-api/apis/v1"
