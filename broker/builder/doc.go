// Package builder is the broker's worker: it resolves an agent's request against the
// session's base lock, classifies it with the catalog, and builds, publishes, signs and
// binds approved requests (an ext layer over the base, or an isolated layer that replaces
// it). A request whose key is already published is only bound; identical requests in
// flight build once. A build that fails leaves the request failed with the reason and
// nothing bound; a worker that dies mid-build resumes the request when it starts again.
//
// It wires layers, oci, registry and catalog together for the broker and must never be
// imported by them.
package builder
