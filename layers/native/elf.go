package native

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// ErrNotELF is returned by Needed for a file that does not start with the ELF magic.
var ErrNotELF = errors.New("not an ELF file")

// ErrMalformed is wrapped by Needed's error for a file that starts like ELF but whose
// headers or dynamic table do not parse.
var ErrMalformed = errors.New("malformed ELF file")

// maxEntries bounds the entries Needed returns of each kind: a real library needs a few
// dozen; a file that claims more is malformed, and reporting all of it would let a
// wheel flood a build's log.
const maxEntries = 4096

// Needed returns the DT_NEEDED sonames of the ELF file at path, in the file's order,
// and its run path: the DT_RUNPATH directories, or DT_RPATH's when there is no
// DT_RUNPATH (the loader ignores DT_RPATH then), split at ':' and unexpanded
// ("$ORIGIN/../numpy.libs"). A file that is not ELF is ErrNotELF; an ELF file without
// a dynamic section (a static executable, an object file) needs nothing.
func Needed(path string) (needed, runpath []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	return neededAt(f)
}

// neededAt is Needed for an open file.
func neededAt(r io.ReaderAt) (needed, runpath []string, err error) {
	var magic [4]byte
	if _, err := r.ReadAt(magic[:], 0); err != nil || !bytes.Equal(magic[:], []byte(elf.ELFMAG)) {
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, nil, err
		}
		return nil, nil, ErrNotELF
	}
	ef, err := elf.NewFile(r)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	defer ef.Close()
	if ef.SectionByType(elf.SHT_DYNAMIC) == nil {
		return nil, nil, nil
	}
	needed, err = dynStrings(ef, elf.DT_NEEDED)
	if err != nil {
		return nil, nil, err
	}
	rp, err := dynStrings(ef, elf.DT_RUNPATH)
	if err != nil {
		return nil, nil, err
	}
	if len(rp) == 0 {
		if rp, err = dynStrings(ef, elf.DT_RPATH); err != nil {
			return nil, nil, err
		}
	}
	for _, s := range rp {
		for _, d := range strings.Split(s, ":") {
			if d != "" && len(runpath) < maxEntries {
				runpath = append(runpath, d)
			}
		}
	}
	return needed, runpath, nil
}

// dynStrings is ef.DynString(tag), bounded, with a parse failure wrapped in ErrMalformed.
func dynStrings(ef *elf.File, tag elf.DynTag) (out []string, err error) {
	defer func() {
		// debug/elf is fuzzed to return errors, not panic; this guards a build against
		// one that slipped through rather than trusting every release to be perfect.
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("%w: reading %v: %v", ErrMalformed, tag, p)
		}
	}()
	ss, err := ef.DynString(tag)
	if err != nil {
		return nil, fmt.Errorf("%w: reading %v: %v", ErrMalformed, tag, err)
	}
	if len(ss) > maxEntries {
		return nil, fmt.Errorf("%w: %d %v entries (at most %d)", ErrMalformed, len(ss), tag, maxEntries)
	}
	return ss, nil
}
