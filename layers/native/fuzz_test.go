package native

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// FuzzNeeded feeds arbitrary bytes to the parser: it must return (never panic), and a
// file must come back as ErrNotELF, ErrMalformed or a bounded answer.
func FuzzNeeded(f *testing.F) {
	// glibc's libutil is a stub of a few KiB: a small seed keeps each run short.
	lib, err := os.ReadFile(hostLib(f, "libutil.so.1"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(lib)
	f.Add(lib[:64])
	f.Add(lib[:len(lib)/2])
	f.Add([]byte("\x7fELF"))
	f.Add([]byte("not elf"))
	f.Fuzz(func(t *testing.T, b []byte) {
		needed, runpath, err := neededAt(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrNotELF) && !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v is neither ErrNotELF nor ErrMalformed", err)
			}
			return
		}
		if len(needed) > maxEntries || len(runpath) > maxEntries {
			t.Fatalf("%d needed, %d run path entries: over the %d bound", len(needed), len(runpath), maxEntries)
		}
	})
}
