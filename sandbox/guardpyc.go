//go:build linux

package sandbox

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/pylayer/pylayer/internal/lazyre"
)

// The guard's bytecode. Python imports the guard's sitecustomize.py from source in every
// session (the support tree is read-only and sessions write no bytecode), and the first
// compile of a process costs about 1 ms: measured on the host, python3.11 -c pass took
// 1.25 ms more with the guard's source on PYTHONPATH and 0.2 ms more with its .pyc (400
// alternating runs). So, once per interpreter, a session of its own compiles the guard
// with that interpreter (compileGuard) into an unchecked-hash .pyc (PEP 552: never
// checked against the source, which is content-addressed beside it), kept in
// <Support>/pyc-<key>/ and bound at the support tree's guard/__pycache__. An interpreter
// of another version finds no .pyc of its cache tag there and compiles the source, as
// without one; a failed compile only leaves the source path.

// guardScript compiles the guard's sitecustomize.py with the session's interpreter and
// writes its cache tag, a newline and the .pyc.
const guardScript = `import importlib.util, marshal, sys
tag = sys.implementation.cache_tag
p = "/opt/pylayer/guard/sitecustomize.py"
src = open(p, "rb").read()
code = compile(src, p, "exec", dont_inherit=True)
out = sys.stdout.buffer
out.write((tag or "").encode() + b"\n")
out.write(importlib.util.MAGIC_NUMBER + (1).to_bytes(4, "little") + importlib.util.source_hash(src) + marshal.dumps(code))`

var cacheTagRE = lazyre.New(`^[a-z][a-z0-9_]*-[0-9]{2,4}$`)

// guardPycDir is where the guard's bytecode for the interpreter of s lives: keyed by
// the support tree and the interpreter prefix (a content-addressed cache directory), or,
// in degraded mode, the host's python3 as it is now (its resolved path, size and time, so
// that an upgrade compiles again).
func guardPycDir(s Spec) (string, error) {
	id := "prefix\x00" + s.Interpreter
	if s.Interpreter == "" {
		p, err := filepath.EvalSymlinks("/usr/bin/python3")
		if err != nil {
			return "", err
		}
		fi, err := os.Stat(p)
		if err != nil {
			return "", err
		}
		id = fmt.Sprintf("host\x00%s\x00%d\x00%d", p, fi.Size(), fi.ModTime().UnixNano())
	}
	h := sha256.Sum256([]byte(supportName() + "\x00" + id))
	return filepath.Join(s.Support, "pyc-"+hex.EncodeToString(h[:16])), nil
}

// guardBytecode returns the directory of the guard's bytecode for s's interpreter,
// compiling it first when there is none yet; "" when there is none to bind. It never
// fails a session: without bytecode the guard runs from source.
func guardBytecode(ctx context.Context, bwrap string, s Spec, user string) string {
	dir, err := guardPycDir(s)
	if err != nil {
		return ""
	}
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if compileGuard(ctx, bwrap, s, user, dir) != nil {
			return ""
		}
		fi, err = os.Lstat(dir)
	}
	if err != nil || checkTree(dir, fi) != nil {
		return ""
	}
	return dir
}

// compileGuard runs guardScript in a session on s's interpreter, support tree and limits,
// with no site processing (the guard does not run), and writes what it printed, checked,
// to dir.
func compileGuard(ctx context.Context, bwrap string, s Spec, user, dir string) error {
	cs := Spec{Interpreter: s.Interpreter, Support: s.Support, Limits: s.Limits, noGuardPyc: true,
		Command: []string{"python3", "-I", "-S", "-c", guardScript}}
	res, err := Run(ctx, bwrap, cs, RunOptions{User: user, Timeout: 30 * time.Second, MaxOutput: 1 << 20})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 || res.StdoutTruncated {
		return fmt.Errorf("compiling the guard: exit %d: %s", res.ExitCode, res.Stderr)
	}
	tag, pyc, ok := bytes.Cut(res.Stdout, []byte("\n"))
	// A .pyc: the interpreter's magic number (ending "\r\n"), flags 1 (hash-based,
	// unchecked), the source hash, and a marshalled code object (type 'c', maybe with
	// FLAG_REF).
	if !ok || !cacheTagRE().Match(tag) || len(pyc) < 17 || !bytes.Equal(pyc[2:4], []byte("\r\n")) ||
		binary.LittleEndian.Uint32(pyc[4:8]) != 1 || pyc[16]&0x7f != 'c' {
		return fmt.Errorf("compiling the guard: unexpected output (%d bytes)", len(res.Stdout))
	}
	return writeTree(ctx, s.Support, dir, []supportEntry{{name: "sitecustomize." + string(tag) + ".pyc", mode: 0o444, data: pyc}})
}
