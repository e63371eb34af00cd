// Package lazyre compiles a regular expression the first time it is used instead of at
// package initialisation. Every pylayer command pays for the init of every package the
// binary links, `run` and `--version` included; compiling the packaging grammars'
// expressions (Unicode classes among them) up front cost more than a millisecond of it.
package lazyre

import (
	"regexp"
	"sync"
)

// New returns a function that compiles pattern once, on its first call, and returns it
// from then on; it panics on a bad pattern, as regexp.MustCompile does.
func New(pattern string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(pattern) })
}
