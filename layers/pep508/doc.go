// Package pep508 parses PEP 508 dependency specifications ("requirements")
// and environment markers, and a strict subset of pip's requirements-file
// format, with the semantics of packaging 21.3 as vendored by pip 23.2.
//
// Differences from packaging 21.3, each a deliberate fix or tightening:
//   - extras are normalized (PEP 685) in Requirement.Extras, and marker
//     comparisons against the extra variable normalize both sides, as
//     packaging 22+ does (pip 23.2 approximates this by evaluating a marker
//     three times with differently spelled extras);
//   - Marker.String keeps parentheses that packaging drops from doubly
//     parenthesized sub-expressions ("((a or b)) and c" stays
//     "(a or b) and c", packaging prints "a or b and c", which means
//     something else), and quotes values so that they re-parse;
//   - Requirement.String puts a space before ";" after a "===" clause;
//   - legacy (non PEP 440) specifiers are errors, see package pep440;
//   - a marker that packaging would evaluate to an exception
//     (UndefinedComparison, UndefinedEnvironmentName) is reported by
//     Marker.Eval as an error, and Evaluate treats it as false.
//
// The package does no network I/O; ParseRequirementsFile reads local files.
// It may import only the standard library and layers/pep440.
package pep508
