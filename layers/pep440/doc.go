// Package pep440 implements PEP 440 versions and version specifiers with
// the semantics of packaging 26.2, the copy vendored by pip 26.1-26.2:
// wildcard and "~=" clauses compared on parsed versions (epochs and zeros
// included), specifier sets that keep every distinct clause, the pre-release
// rules of packaging 24.2-26.2 (a pre-release operand of "<" or ">" admits
// pre-releases; filter falls back to pre-releases when no final release
// matches; "<V.postN" and ">V" exclude only pre-, post- and local versions of
// exactly V).
//
// Debian's pip 23 (packaging 21.3) is the test oracle where the two agree;
// oracle_test.go names the packaging change behind every answer that
// differs.
//
// Deliberate differences, all of them on input no wheel index serves:
//   - LegacyVersion does not exist: a string that is not PEP 440 is an error
//     (ErrInvalidVersion), and a specifier clause that packaging would
//     demote to a LegacySpecifier is an error (ErrInvalidSpecifier).
//   - Versions and specifiers must be ASCII; packaging's case-insensitive
//     Unicode matching would accept look-alike letters such as U+212A.
//   - Numeric components must fit in an int (local segments excepted, which
//     are compared as arbitrary-precision decimal strings).
//   - "===" needs a non-empty operand.
//
// Values are immutable. The package does no I/O and must never import
// anything outside the standard library.
package pep440
