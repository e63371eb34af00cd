// Package catalog is pylayer's package policy: the curated base list, an
// allowlist (names, optionally PEP 440 version ranges), a denylist and size
// caps per wheel and per layer, loaded from a strict JSON or YAML file; and
// the classification of a resolved package request into auto-approved,
// pending (a human decides) or rejected, with one reason in words per
// finding, each naming the package.
//
// Classification is a pure function of the catalog and the request: it does
// no I/O, resolves nothing and never changes its inputs. The caller (the
// broker) resolves the request against the session's base lock first and
// passes the result in a Request.
//
// Policy choices worth knowing:
//   - The denylist always wins: a denylisted name anywhere in a request (a
//     resolved package, a requested name, the project a resolution error
//     names) rejects the whole request.
//   - A name on the base list is allowlisted in the versions its base
//     requirement admits; curated packages need no second entry.
//   - Version ranges follow pip (packaging 21.3): a pre-release matches an
//     allowlist rule only if the rule's specifier itself mentions a
//     pre-release, so pre-releases need a human unless explicitly allowed.
//   - A cap that is set cannot be checked against a wheel of unknown size
//     (Size 0); such a wheel waits for a human instead of slipping through.
//   - A wheel whose compiled code needs shared libraries that are neither in
//     the wheel nor on the target platform's allow-list is built with a
//     warning, unless the catalog says native: refuse; then the request is
//     rejected with the wheel, the sonames and the files named.
//   - A malformed request (invalid name or version, a file that is not a
//     wheel or does not match its package, a bad sha256, duplicate names) is
//     rejected: nothing is auto-approved on data that does not add up.
//
// catalog may import the layers packages (pep440, pep508, wheel, resolve)
// and the YAML decoder; it must never import oci, registry, sandbox or
// broker, and must never print or log.
package catalog
