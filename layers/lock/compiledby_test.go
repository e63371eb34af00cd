package lock

import (
	"regexp"
	"testing"
)

// compiledByPattern is the pattern compiledByTag stands for.
var compiledByPattern = regexp.MustCompile(`^(cpython-3[0-9]+) [0-9a-f]{8} [!-~]+( [!-~]+)*$`)

// FuzzCompiledByTag: compiledByTag gives exactly what its pattern gives, on any string.
func FuzzCompiledByTag(f *testing.F) {
	for _, s := range []string{
		"cpython-311 a70d0d0a 3.11.2 (main, Mar 13 2023, 12:18:29) [GCC 12.2.0]",
		"cpython-311 a70d0d0a 3.11.2", "cpython-3 a70d0d0a 3.11.2", "cpython-311 A70D0D0A 3.11.2",
		"cpython-311 a70d0d0 3.11.2", "cpython-311 a70d0d0a  3.11.2", "cpython-311 a70d0d0a 3.11.2 ",
		"cpython-311 a70d0d0a", "cpython-311 a70d0d0a ", "cpython-311  a70d0d0a 3.11", "pypy-311 a70d0d0a 3.11",
		"cpython-311 a70d0d0a 3.11\t2", "cpython-311 a70d0d0a 3.11\n", "cpython-311 a70d0d0a 3.11\xff", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tag, ok := compiledByTag(s)
		if m := compiledByPattern.FindStringSubmatch(s); (m != nil) != ok || (ok && m[1] != tag) {
			t.Errorf("compiledByTag(%q) = %q %v, the pattern %q", s, tag, ok, m)
		}
	})
}
