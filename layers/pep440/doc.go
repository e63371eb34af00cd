// Package pep440 implements PEP 440 versions and version specifiers with
// the exact semantics of packaging 21.3, the copy vendored by pip 23.2, which
// is the behaviour pylayer is compared against.
//
// Where packaging 21.3 has a quirk that pip users observe (for example that
// "<1.0" excludes "1.0.dev1", that ">1.0" excludes "1.0.post1", or that
// SpecifierSet.filter with a non-empty set never falls back to
// pre-releases), this package reproduces it and says so in the doc comment.
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
