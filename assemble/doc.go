// Package assemble puts together what one sandbox runs on: it ensures each layer in the
// host cache (pulled and verified when missing, re-checked against the current trust
// policy when present), holds it against gc until released, and returns the interpreter
// root and the sandbox layers in the order the sandbox mounts them. It owns the rule of a
// broker session's layers: the newest isolated (iso) layer replaces the base, and ext
// layers follow, oldest first.
//
// pylayer run, ensure and doctor use it. It must never import broker, catalog, publish or
// internal/cli: a session reaches it as a Session value, converted by the caller.
package assemble
