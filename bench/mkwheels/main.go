// Command mkwheels writes the synthetic wheels of the pull benchmark (bench/pull.sh) into
// an index directory: N packages bench-pkg-00 ... at version 1.0, and a version 2.0 of the
// last CHANGED of them, so that a second lock can share all but CHANGED blobs with the
// first.
//
//	go run ./bench/mkwheels -out DIR [-n 30] [-changed 2] [-big 3] [-big-size 1200000] [-small 300]
//
// Each wheel holds BIG random (incompressible, like native extension modules) files of
// BIG-SIZE bytes and SMALL generated Python modules of 1-3 KiB (compressible, like a
// pure-Python package), so a layer set has both the byte volume and the file count of a
// real one. Content is a pure function of the flags: the same flags write the same bytes.
// On success it prints every wheel it wrote, one path a line, and nothing else.
package main

import (
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/pylayer/pylayer/test/fixture"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mkwheels:", err)
		os.Exit(1)
	}
}

type params struct {
	n, changed, big, bigSize, small int
}

func run(args []string) error {
	fs := flag.NewFlagSet("mkwheels", flag.ContinueOnError)
	out := fs.String("out", "", "index directory to write (created if missing)")
	var p params
	fs.IntVar(&p.n, "n", 30, "number of packages")
	fs.IntVar(&p.changed, "changed", 2, "packages (the last ones) that also get a version 2.0")
	fs.IntVar(&p.big, "big", 3, "random binary files per wheel")
	fs.IntVar(&p.bigSize, "big-size", 1200000, "bytes of each random binary file")
	fs.IntVar(&p.small, "small", 300, "small Python modules per wheel")
	if err := fs.Parse(args); err != nil {
		return err
	}
	switch {
	case *out == "" || fs.NArg() > 0:
		return errors.New("usage: mkwheels -out DIR [-n 30] [-changed 2] [-big 3] [-big-size 1200000] [-small 300]")
	case p.n < 1 || p.n > 100:
		return fmt.Errorf("-n %d: want 1 to 100 packages", p.n)
	case p.changed < 0 || p.changed > p.n:
		return fmt.Errorf("-changed %d: want 0 to -n (%d)", p.changed, p.n)
	case p.big < 0 || p.bigSize < 0 || p.small < 0 || int64(p.big)*int64(p.bigSize) > 256<<20:
		return fmt.Errorf("-big %d -big-size %d -small %d: want non-negative counts and at most 256 MiB of binary files per wheel", p.big, p.bigSize, p.small)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", *out, err)
	}
	for i := 0; i < p.n; i++ {
		versions := []string{"1.0"}
		if i >= p.n-p.changed {
			versions = append(versions, "2.0")
		}
		for _, v := range versions {
			w := wheel(fmt.Sprintf("bench-pkg-%02d", i), v, p)
			path, err := w.Write(*out)
			if err != nil {
				return fmt.Errorf("writing %s: %w", w.Filename(), err)
			}
			fmt.Println(path)
		}
	}
	return nil
}

// wheel generates one package; its bytes depend only on name, version and p.
func wheel(name, version string, p params) fixture.Wheel {
	seed := sha256.Sum256([]byte(name + "\x00" + version))
	src := rand.NewChaCha8(seed)
	rng := rand.New(src)
	mod := fixture.Module(name)
	files := []fixture.File{{Path: mod + "/__init__.py", Data: []byte(fmt.Sprintf("__version__ = %q\n", version))}}
	for j := 0; j < p.big; j++ {
		b := make([]byte, p.bigSize)
		_, _ = src.Read(b) // never fails
		files = append(files, fixture.File{Path: fmt.Sprintf("%s/_native%d.cpython-311-x86_64-linux-gnu.so", mod, j), Data: b, Mode: 0o755})
	}
	for j := 0; j < p.small; j++ {
		files = append(files, fixture.File{Path: fmt.Sprintf("%s/sub%02d/m%03d.py", mod, j/50, j), Data: pyModule(rng)})
	}
	for j := 0; j < (p.small+49)/50; j++ {
		files = append(files, fixture.File{Path: fmt.Sprintf("%s/sub%02d/__init__.py", mod, j), Data: nil})
	}
	return fixture.Wheel{
		Name:    name,
		Version: version,
		Tag:     "cp311-cp311-manylinux_2_28_x86_64",
		Summary: "synthetic wheel of the pylayer pull benchmark",
		Files:   files,
	}
}

// pyModule is 1-3 KiB of plausible Python source with random identifiers and constants.
func pyModule(rng *rand.Rand) []byte {
	var b strings.Builder
	b.WriteString("\"\"\"Generated module of the pylayer pull benchmark.\"\"\"\n\n")
	target := 1024 + rng.IntN(2048)
	for b.Len() < target {
		fmt.Fprintf(&b, "def f_%08x(x, y=%d):\n    \"\"\"Return a mix of x and y.\"\"\"\n    return (x * %d + y) ^ 0x%x\n\n\n",
			rng.Uint32(), rng.IntN(1000), rng.IntN(1<<20), rng.Uint64())
	}
	return []byte(b.String())
}
