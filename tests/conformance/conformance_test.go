// Package conformance runs the upstream Gateway API conformance suite
// (sigs.k8s.io/gateway-api/conformance, the version go.mod pins) against peerplane:
// the suite itself, not a copy, with the flags the upstream docs give. tests/conformance/run
// starts the cluster, the node stand-in, the control plane and the HAProxy agents first.
package conformance

import (
	"testing"

	"sigs.k8s.io/gateway-api/conformance"
)

func TestConformance(t *testing.T) {
	conformance.RunConformance(t)
}
