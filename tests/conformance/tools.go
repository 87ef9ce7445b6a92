//go:build tools

// The upstream echo backend (conformance/echo-basic) the node stand-in runs for each pod:
// a blank import keeps it in go.mod, so it builds from the very module the suite comes from.
package conformance

import _ "sigs.k8s.io/gateway-api/conformance/echo-basic"
