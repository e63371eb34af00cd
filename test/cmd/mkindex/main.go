// Command mkindex writes a local package index directory for demos, benchmarks and manual
// runs of pylayer index serve: Debian's real pip, setuptools and wheel wheels, the office set
// repacked from Debian (python-docx, openpyxl, XlsxWriter, lxml, et_xmlfile) and, with
// -corpus, the generated resolution corpus of test/fixture. With -curated it writes the
// whole curated base instead of the office set (fixture.RepackCurated: numpy, matplotlib,
// Pillow, reportlab, pypdf, Markdown, pdfminer.six and their dependencies, the office set
// among them, with their shared libraries vendored).
//
//	go run ./test/cmd/mkindex -out DIR [-corpus] [-curated] [-office=false] [-debian=false] [-cache DIR]
//
// It needs apt-get and dpkg (Debian 12) and root to install the *-whl packages. On success
// it prints every distribution file in DIR, one path a line, and nothing else.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"syscall"

	"github.com/pylayer/pylayer/test/fixture"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mkindex:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("mkindex", flag.ContinueOnError)
	out := fs.String("out", "", "index directory to write (created if missing)")
	corpus := fs.Bool("corpus", false, "also write the generated resolution corpus")
	office := fs.Bool("office", true, "write the office set repacked from Debian")
	curated := fs.Bool("curated", false, "write the curated base repacked from Debian (the office set included, its lxml vendored)")
	debian := fs.Bool("debian", true, "write Debian's pip, setuptools and wheel wheels")
	cache := fs.String("cache", fixture.DebCache(), "where `make deps` keeps the .deb files ($PYLAYER_DEBS)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() > 0 {
		return errors.New("usage: mkindex -out DIR [-corpus] [-curated] [-office=false] [-debian=false] [-cache DIR]")
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		return fmt.Errorf("creating %s: %w", *out, err)
	}
	if *debian {
		if _, err := fixture.DebianWheels(ctx, *out); err != nil {
			return err
		}
	}
	switch {
	case *curated:
		// A superset of the office set, under the same file names.
		if _, err := fixture.RepackCurated(ctx, *cache, *out); err != nil {
			return err
		}
	case *office:
		if _, err := fixture.RepackDebian(ctx, *cache, *out); err != nil {
			return err
		}
	}
	if *corpus {
		if err := fixture.WriteCorpus(*out); err != nil {
			return err
		}
	}
	var files []string
	for _, pattern := range []string{"*.whl", "*.tar.gz"} {
		m, err := filepath.Glob(filepath.Join(*out, pattern))
		if err != nil {
			return err
		}
		files = append(files, m...)
	}
	sort.Strings(files)
	for _, p := range files {
		fmt.Println(p)
	}
	return nil
}
