// The cert-manager release whose CRDs (deploy/crds) the tests apply to a real API server
// before deploy/examples/tls, as its users install cert-manager first. Only the module's
// files are used, never built: `go mod download -json github.com/cert-manager/cert-manager`
// here fetches the pinned version, checked against go.sum.
module peerplane.dev/tests/cluster/certmanager

go 1.26

require github.com/cert-manager/cert-manager v1.21.2
