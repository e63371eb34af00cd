package wheel

import (
	"context"
	"fmt"
	"strings"
)

// CompileTree compiles srcs, slash paths of .py files relative to root, as Install
// compiles a wheel's sources: to unchecked-hash .pyc (PEP 552) in the __pycache__
// directories beside them, each one's co_filename prefix + "/" + its path, the bytes a
// fresh process writes (see Compiler). It is for trees other than a wheel's, such as
// an interpreter's standard library packed to be mounted at prefix. A source that
// does not compile is skipped, as pip skips it. It returns the .pyc written, relative
// to root, and the sources skipped, in the order of srcs. A .pyc already there is
// replaced by a new file (renamed over it), never written through.
func (c *Compiler) CompileTree(ctx context.Context, root, prefix string, srcs []string) (pycs, skipped []string, err error) {
	pycs, skipped, err = c.compile(ctx, root, prefix, srcs)
	if err != nil {
		return nil, nil, fmt.Errorf("compiling %d sources of %s: %w", len(srcs), root, err)
	}
	for i, p := range pycs { // checkCompiled names them as a wheel's tree does
		pycs[i] = strings.TrimPrefix(p, "site-packages/")
	}
	return pycs, skipped, nil
}
