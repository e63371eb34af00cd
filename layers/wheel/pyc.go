package wheel

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"
)

// compileScript compiles the .py files named on stdin to unchecked-hash .pyc files
// (PEP 552) whose co_filename is the in-sandbox path. Files that do not compile (Python 2
// syntax, bad encodings ...) are skipped, as pip does.
const compileScript = `
import importlib.util, json, os, py_compile, sys, warnings
warnings.filterwarnings("ignore")
req = json.loads(sys.stdin.buffer.read().decode("utf-8"))
root, prefix = req["root"], req["prefix"]
out = {"compiled": [], "skipped": []}
for rel in req["files"]:
    src = os.path.join(root, rel)
    cfile = importlib.util.cache_from_source(src)
    try:
        py_compile.compile(src, cfile=cfile, dfile=prefix + "/" + rel, doraise=True,
                           invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    except py_compile.PyCompileError:
        out["skipped"].append(rel)
        continue
    out["compiled"].append(os.path.relpath(cfile, root))
sys.stdout.buffer.write(json.dumps(out).encode("ascii"))
`

// compile runs the interpreter once for the wheel and returns the tree paths of the
// .pyc files it wrote and the sources it skipped.
//
// The interpreter runs with an empty environment except PYTHONHASHSEED=0, which makes
// the order of set constants, and so the .pyc bytes, reproducible. That rules out -I and
// -E (both ignore PYTHONHASHSEED); -S -s keep site-packages and user site out of
// sys.path instead, and the working directory (sys.path[0] for -c) is an empty private
// directory, so no file of the wheel can shadow a module the script imports.
func compile(ctx context.Context, tmp string, srcs []string, o InstallOptions) ([]string, []string, error) {
	site := filepath.Join(tmp, "site-packages")
	req, err := json.Marshal(map[string]any{"root": site, "prefix": o.SitePackagesDir, "files": srcs})
	if err != nil {
		return nil, nil, err
	}
	cwd, err := os.MkdirTemp("", "pylayer-pyc-")
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(cwd)
	cmd := exec.CommandContext(ctx, o.Interpreter, "-S", "-s", "-B", "-X", "utf8", "-c", compileScript)
	cmd.Env = []string{"PYTHONHASHSEED=0"}
	cmd.Dir = cwd
	cmd.Stdin = bytes.NewReader(req)
	var stdout bytes.Buffer
	stderr := &capped{max: 64 << 10}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return nil, nil, fmt.Errorf("compiling .pyc with %s: %w: %s", o.Interpreter, err, strings.TrimSpace(stderr.buf.String()))
	}
	var res struct{ Compiled, Skipped []string }
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return nil, nil, fmt.Errorf("compiling .pyc with %s: unexpected output: %w", o.Interpreter, err)
	}
	var pycs []string
	for _, c := range res.Compiled {
		c = filepath.ToSlash(c)
		if !filepath.IsLocal(c) || path.Clean(c) != c || path.Base(path.Dir(c)) != "__pycache__" || !strings.HasSuffix(c, ".pyc") {
			return nil, nil, fmt.Errorf("compiling .pyc with %s: unexpected output file %q", o.Interpreter, c)
		}
		pycs = append(pycs, "site-packages/"+c)
	}
	return pycs, res.Skipped, nil
}

// capped keeps the first max bytes written to it.
type capped struct {
	buf bytes.Buffer
	max int
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
