// Package registrytest runs a real OCI registry for tests: Debian's docker-registry
// (distribution 2.8) on 127.0.0.1 with a generated CA, TLS and htpasswd auth, its JSON log
// parsed into the requests it served, and a fault-injecting TLS proxy for retry tests.
//
// It is test support only: production packages must never import it. It must never import
// pylayer's own packages either, so that it tests them as any registry client would.
package registrytest
