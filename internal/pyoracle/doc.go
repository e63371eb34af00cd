// Package pyoracle runs Python snippets against pip's vendored packaging 21.3, the oracle
// whose answers pylayer's PEP 440 and PEP 508 parsers must match (pip is what pylayer is
// compared against).
//
// It is test support: import it only from _test.go files. It imports nothing of pylayer.
package pyoracle
