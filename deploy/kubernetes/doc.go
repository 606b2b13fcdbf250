// Package kubernetes holds the test of the Kubernetes manifests in base/
// (docs/kubernetes.md): it decodes them strictly into the API types and
// checks them against the binaries' flags and the topology they mount.
package kubernetes
