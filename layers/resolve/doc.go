// Package resolve pins a set of PEP 508 requirements to one wheel per project for a
// target, the way pip 26.1-26.2 (packaging 26.2) resolves with `--only-binary=:all:`: every
// requirement on a project stays its own clause, never merged into another (pip is the oracle the
// end-to-end tests compare against): highest version first, pip's pre-release and yanked
// rules, requires-python, markers and extras evaluated for the target, constraints that
// narrow but never add, and the pins of a base layer that an ext layer must live with.
//
// It reads an index through the small Index interface and must never import registry,
// oci, sandbox or broker packages.
package resolve
