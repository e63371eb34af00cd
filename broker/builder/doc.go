// Package builder is the broker's worker: it resolves an agent's request against the
// session's base lock, classifies it with the catalog, and builds, publishes, signs and
// binds approved requests (an ext layer over the base, or an isolated layer that replaces
// it). A request whose key is already published is only bound; identical requests in
// flight build once. A build that fails leaves the request failed with the reason and
// nothing bound. Builds are claimed with leases renewed while building (Store.ClaimBuild),
// and a layer is published under a lease named after its tag, so that any number of
// replicas build each distinct layer once; a worker that dies mid-build (kill -9, a lost
// host) leaves a lease that expires, and another replica, or this one restarted, takes
// the build over.
//
// It wires layers, oci, registry and catalog together for the broker and must never be
// imported by them.
package builder
