// Package target describes what a lock is built for: the CPython version and
// ABI, the ordered platform tags wheels may carry, and the pinned PEP 508
// marker environment, together with the PEP 425 tag logic (Tags, Rank,
// ParseTagSet) that decides which wheels fit.
//
// A Target is never taken from the build host implicitly: FromFlags builds it
// from a python version and a platform floor, and Probe asks one explicitly
// named interpreter. Tag order and platform expansion mirror pip 23.2 and
// its vendored packaging 21.3 exactly; the tests compare against them.
//
// The Target JSON form is part of every lock and therefore of every layer key:
// it is canonical, strictly decoded, and never written for an invalid Target.
//
// This package uses only the standard library. It must never import other
// pylayer packages (registry, oci, sandbox, broker, catalog, cmd) nor any
// network client.
package target
