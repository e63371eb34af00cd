// Package pep508 parses PEP 508 dependency specifications ("requirements")
// and environment markers, and a strict subset of pip's requirements-file
// format, with the semantics of packaging 26.2 as vendored by pip 26.1-26.2:
// its tokens (whitespace is spaces and tabs, so a trailing line break is
// refused; "===x" ends at ';' and ')'; "name()" is any version; "and", "or",
// "in", "not" and variables end on word boundaries), its marker evaluation
// (version comparison only for the version variables, pre-release and "+"
// interpreter versions admitted) and its String forms ("name @ url",
// extra values normalized). Debian's pip 23 (packaging 21.3) is the test
// oracle where the two agree; oracle_test.go names the change behind every
// difference.
//
// Differences from packaging 26.2, each a deliberate fix or tightening:
//   - extras are normalized (PEP 685) in Requirement.Extras, and marker
//     comparisons against the extra variable normalize both sides, as
//     packaging 22+ does (pip 23.2 approximates this by evaluating a marker
//     three times with differently spelled extras);
//   - Marker.String keeps parentheses that packaging drops from doubly
//     parenthesized sub-expressions ("((a or b)) and c" stays
//     "(a or b) and c", packaging prints "a or b and c", which means
//     something else), and quotes values so that they re-parse;
//   - quoted marker values are taken literally (packaging applies Python's
//     literal_eval, so escapes such as \x41 are decoded) except for \t \n
//     \f \r, and may not span lines;
//   - legacy (non PEP 440) specifiers are errors, see package pep440;
//   - a marker that packaging would evaluate to an exception
//     (UndefinedComparison, UndefinedEnvironmentName) is reported by
//     Marker.Eval as an error, and Evaluate treats it as false.
//
// The package does no network I/O; ParseRequirementsFile reads local files.
// It may import only the standard library and layers/pep440.
package pep508
