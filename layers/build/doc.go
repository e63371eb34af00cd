// Package build turns a lock into installed per-wheel trees: it fetches each wheel once
// into a wheelhouse keyed by sha256 (verifying the hash), installs it into a tree keyed by
// the wheel's hash and the install options, and reuses both across builds and processes.
// A build of a lock (EachTree) fetches the missing wheels all at once, installs them a
// few at a time, the biggest first, with one wheel.Compiler shared for their .pyc, and
// hands each tree on (to be packed) as soon as it is in place.
//
// Everything is written to a temporary name and renamed into place, so a crash never leaves
// a partial wheel or tree under its final name. It must never import oci, registry, sandbox
// or broker packages: packing trees into artifacts is the oci package's job.
package build
