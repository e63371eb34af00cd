package wheel

import (
	"archive/zip"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"path"
	"strings"
	"sync/atomic"
	"unicode/utf8"

	"github.com/pylayer/pylayer/internal/fsx"
	"github.com/pylayer/pylayer/internal/gunzip"
)

// Limits on the small files read into memory.
const (
	maxRecordBytes      = 64 << 20
	maxEntryPointsBytes = 4 << 20
	maxWheelFileBytes   = 1 << 20
)

// Unix mode bits as zip external attributes carry them.
const (
	sIFMT   = 0o170000
	sIFREG  = 0o100000
	sIFDIR  = 0o040000
	sIFLNK  = 0o120000
	special = 0o7000 // setuid, setgid, sticky
)

// Destination kinds of an installed file.
const (
	kindLib    = iota // site-packages
	kindScript        // bin, "#!python" rewritten
	kindOther         // include, data
)

// entry is one archive member to install.
type entry struct {
	zf   *zip.File
	dest string // path in the tree, e.g. "site-packages/pkg/mod.py", "bin/tool"
	kind int
	exec bool
	row  recordRow
}

// plan is a verified wheel: what to write, decided before anything is written.
type plan struct {
	fn       Filename
	meta     *Metadata
	distInfo string
	entries  []*entry
	rows     map[string]recordRow
	scripts  []script // generated entry point scripts, in bin/
	pySrcs   []string // .py files under site-packages, relative to it, sorted
	// held are the verified bytes of members, as verifyMembers inflated them, while
	// they fit in holdBytes: written from memory, they are not inflated twice.
	held map[*zip.File][]byte
}

// holdBytes bounds the bytes of one wheel's members that an install holds in memory
// between verifying and writing them (8 installs at a time hold 128 MiB at most); the
// rest are inflated and checked again as they are written. A variable for tests only.
var holdBytes int64 = 16 << 20

// checkName validates a member name; dir reports a directory entry ("x/").
func checkName(zf *zip.File) (dir bool, err error) {
	name := zf.Name
	unsafe := func(why string) (bool, error) {
		return false, fmt.Errorf("%w: member %q: %s", ErrUnsafePath, name, why)
	}
	switch {
	case name == "" || len(name) > 4096:
		return unsafe("empty or longer than 4096 bytes")
	case !utf8.ValidString(name):
		return unsafe("not valid UTF-8")
	case zf.Flags&0x800 == 0 && !isASCII(name):
		return unsafe("non-ASCII name without the UTF-8 flag (ambiguous encoding)")
	case strings.HasPrefix(name, "/"):
		return unsafe("absolute path")
	case strings.ContainsRune(name, '\\'):
		return unsafe("backslash in path")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return unsafe("NUL or control character in path")
		}
	}
	dir = strings.HasSuffix(name, "/")
	for _, c := range strings.Split(strings.TrimSuffix(name, "/"), "/") {
		switch {
		case c == "":
			return unsafe("empty path component")
		case c == "." || c == "..":
			return unsafe("\".\" or \"..\" path component")
		case len(c) > 255:
			return unsafe("path component longer than 255 bytes")
		}
	}
	mode := zf.ExternalAttrs >> 16
	switch typ := mode & sIFMT; {
	case typ == sIFLNK:
		return unsafe("symbolic link")
	case typ != 0 && typ != sIFREG && typ != sIFDIR:
		return unsafe(fmt.Sprintf("special file (mode %#o)", mode))
	case typ == sIFDIR && !dir || typ == sIFREG && dir:
		return unsafe(fmt.Sprintf("file type (mode %#o) does not match the name", mode))
	case mode&special != 0:
		return unsafe(fmt.Sprintf("setuid, setgid or sticky bit (mode %#o)", mode))
	}
	if zf.Flags&0x1 != 0 {
		return false, fmt.Errorf("%w: member %q is encrypted", ErrBadWheel, name)
	}
	if dir && zf.UncompressedSize64 != 0 {
		return false, fmt.Errorf("%w: directory member %q has content", ErrBadWheel, name)
	}
	return dir, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// isExecutable is pip's zip_item_is_executable: a regular file with any x bit.
func isExecutable(zf *zip.File) bool {
	mode := zf.ExternalAttrs >> 16
	return mode&sIFMT == sIFREG && mode&0o111 != 0
}

// versionKey is the light version normalization used to compare the version in the
// file name, the .dist-info name and METADATA: case-insensitive, "-" and "_" alike.
func versionKey(v string) string {
	return strings.ToLower(strings.ReplaceAll(v, "-", "_"))
}

// scan validates the archive and verifies every member against RECORD, reading (and
// inflating) everything once but writing nothing.
func scan(ctx context.Context, zr *zip.Reader, ra io.ReaderAt, fn Filename, o InstallOptions) (*plan, error) {
	if len(zr.File) > o.MaxFiles {
		return nil, fmt.Errorf("%w: %d members, limit %d", ErrTooLarge, len(zr.File), o.MaxFiles)
	}
	p := &plan{fn: fn}
	byName := map[string]*zip.File{}
	folded := map[string]string{}
	var files []*zip.File
	for _, zf := range zr.File {
		dir, err := checkName(zf)
		if err != nil {
			return nil, err
		}
		if _, dup := byName[zf.Name]; dup {
			return nil, fmt.Errorf("%w: member %q appears twice in the archive", ErrUnsafePath, zf.Name)
		}
		key := strings.ToLower(strings.TrimSuffix(zf.Name, "/"))
		if other, dup := folded[key]; dup {
			return nil, fmt.Errorf("%w: members %q and %q collide (same path ignoring case)", ErrUnsafePath, other, zf.Name)
		}
		byName[zf.Name], folded[key] = zf, zf.Name
		if !dir {
			files = append(files, zf)
		}
	}
	di, err := findDistInfo(zr.File)
	if err != nil {
		return nil, err
	}
	if err := checkDistInfo(di, fn); err != nil {
		return nil, err
	}
	p.distInfo = di
	small := func(base string, limit int64, required bool) ([]byte, error) {
		zf := byName[di+"/"+base]
		if zf == nil {
			if required {
				return nil, fmt.Errorf("%w: no %s/%s", ErrBadWheel, di, base)
			}
			return nil, nil
		}
		return readSmall(zf, min(limit, o.MaxFileBytes))
	}
	recordBytes, err := small("RECORD", maxRecordBytes, true)
	if err != nil {
		return nil, err
	}
	if p.rows, err = parseRecord(recordBytes); err != nil {
		return nil, err
	}
	if err := p.checkRows(byName, di); err != nil {
		return nil, err
	}
	if p.held, err = verifyMembers(ctx, ra, files, p.rows, di, o); err != nil {
		return nil, err
	}
	// Everything below reads members already verified against RECORD.
	metaBytes, err := small("METADATA", maxMetadataBytes, true)
	if err != nil {
		return nil, err
	}
	if p.meta, err = ParseMetadata(metaBytes); err != nil {
		return nil, fmt.Errorf("%s/METADATA: %w", di, err)
	}
	if NormalizeName(p.meta.Name) != fn.Project() || versionKey(p.meta.Version) != versionKey(fn.Version) {
		return nil, fmt.Errorf("%w: METADATA says %s %s, the file name says %s %s", ErrBadWheel, p.meta.Name, p.meta.Version, fn.Name, fn.Version)
	}
	wheelBytes, err := small("WHEEL", maxWheelFileBytes, true)
	if err != nil {
		return nil, err
	}
	if err := checkWheelFile(wheelBytes, di); err != nil {
		return nil, err
	}
	epBytes, err := small("entry_points.txt", maxEntryPointsBytes, false)
	if err != nil {
		return nil, err
	}
	eps, err := parseEntryPoints(epBytes)
	if err != nil {
		return nil, fmt.Errorf("%s/entry_points.txt: %w", di, err)
	}
	if err := p.layout(files, eps, o); err != nil {
		return nil, err
	}
	return p, nil
}

// checkDistInfo checks that the .dist-info directory is <name>-<version>.dist-info of
// the wheel's file name (names PEP 503 normalized, versions compared by versionKey).
func checkDistInfo(di string, fn Filename) error {
	stem := strings.TrimSuffix(di, ".dist-info")
	name, version, ok := strings.Cut(stem, "-")
	if !ok || NormalizeName(name) != fn.Project() || versionKey(version) != versionKey(fn.Version) {
		return fmt.Errorf("%w: .dist-info directory %q does not match the file name (%s %s)", ErrBadWheel, di, fn.Name, fn.Version)
	}
	return nil
}

// checkWheelFile requires a Wheel-Version of major version 1, as pip does.
func checkWheelFile(b []byte, di string) error {
	if !utf8.Valid(b) {
		return fmt.Errorf("%w: %s/WHEEL is not UTF-8", ErrBadWheel, di)
	}
	v, ok := parseHeaders(string(b)).get("Wheel-Version")
	major, _, _ := strings.Cut(strings.TrimSpace(v), ".")
	if !ok || strings.TrimLeft(major, "0") != "1" {
		return fmt.Errorf("%w: %s/WHEEL has Wheel-Version %q, only 1.x is supported", ErrBadWheel, di, v)
	}
	return nil
}

// isSignature reports RECORD's signature files, which RECORD does not list.
func isSignature(name, di string) bool {
	return name == di+"/RECORD.jws" || name == di+"/RECORD.p7s"
}

// checkRows requires every RECORD row to name an archive member, except RECORD itself,
// directories and .pyc files.
func (p *plan) checkRows(byName map[string]*zip.File, di string) error {
	for name, row := range p.rows {
		if name == di+"/RECORD" || strings.HasSuffix(name, "/") || strings.HasSuffix(name, ".pyc") {
			continue
		}
		if byName[name] == nil {
			return fmt.Errorf("%w for %s: listed in RECORD (line %d) but not in the archive", ErrRecordMismatch, name, row.line)
		}
	}
	return nil
}

// verifyMembers checks sizes against the limits first, then inflates every member once
// and compares it with its RECORD row. It returns the verified bytes of the members, in
// archive order, while they add up to no more than holdBytes.
func verifyMembers(ctx context.Context, ra io.ReaderAt, files []*zip.File, rows map[string]recordRow, di string, o InstallOptions) (map[*zip.File][]byte, error) {
	var total int64
	for _, zf := range files {
		if zf.Name == di+"/RECORD" {
			total += int64(min(zf.UncompressedSize64, maxRecordBytes))
			continue
		}
		row, ok := rows[zf.Name]
		if !ok {
			if isSignature(zf.Name, di) {
				continue // not verified, and not installed either
			}
			return nil, fmt.Errorf("%w for %s: not listed in RECORD", ErrRecordMismatch, zf.Name)
		}
		if row.hash == nil {
			return nil, fmt.Errorf("%w for %s: RECORD has no hash for it", ErrRecordMismatch, zf.Name)
		}
		if row.size > o.MaxFileBytes {
			return nil, fmt.Errorf("%w: %s is %d bytes, limit %d per file", ErrTooLarge, zf.Name, row.size, o.MaxFileBytes)
		}
		if total += row.size; total > o.MaxTotalBytes {
			return nil, fmt.Errorf("%w: %s brings the total past %d bytes", ErrTooLarge, zf.Name, o.MaxTotalBytes)
		}
		if zf.UncompressedSize64 != uint64(row.size) {
			return nil, fmt.Errorf("%w for %s: size %d != %d (RECORD)", ErrRecordMismatch, zf.Name, zf.UncompressedSize64, row.size)
		}
	}
	held := map[*zip.File][]byte{}
	var kept int64
	var raw []byte
	for _, zf := range files {
		row, ok := rows[zf.Name]
		if !ok || zf.Name == di+"/RECORD" {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hold := row.size <= holdBytes-kept
		if hold && o.TrustedBytes {
			if b := inflateHeld(ra, zf, row.size, &raw); b != nil {
				if err := row.check(zf.Name, int64(len(b)), row.sum(b)); err != nil {
					return nil, err
				}
				held[zf], kept = b, kept+row.size
				continue
			}
		}
		rc, err := zf.Open()
		if err != nil {
			return nil, fmt.Errorf("%w: opening %s: %v", ErrBadWheel, zf.Name, err)
		}
		if hold {
			var b []byte
			b, err = row.verifyKeep(zf.Name, fsx.Reader(ctx, rc))
			held[zf], kept = b, kept+row.size
		} else {
			err = row.verify(zf.Name, fsx.Reader(ctx, rc))
		}
		rc.Close()
		if err != nil {
			return nil, err
		}
	}
	return held, nil
}

// inflateHeld is the fast path of a member the install holds, of a wheel whose bytes are
// trusted (InstallOptions.TrustedBytes): its deflate data read in one call from ra, the
// archive, and inflated in one call into a buffer of its RECORD size, with libdeflate
// (gunzip.Deflated, in pylayer-full), which inflates about twice as fast as
// compress/flate: a cold build of the office set spent 8% of its CPU in archive/zip's
// inflater. It checks what archive/zip checks: the size, the CRC-32 the central
// directory states, and a data descriptor's CRC-32 against it. It returns nil whenever it
// does not apply (no libdeflate, a stored member, compressed data larger than a deflate
// stream of that size can be) or the member is not exactly what the archive says
// (another size, a bad stream, another CRC-32): the caller then reads it through
// archive/zip as before, whose errors are the ones users see. Either way the bytes are
// then checked against RECORD, whose digests decide: libdeflate's one known leniency
// (internal/gunzip) lets through a stream Go calls corrupt only if it inflates to the
// very bytes RECORD names. raw is a buffer for the compressed bytes, reused from member
// to member.
func inflateHeld(ra io.ReaderAt, zf *zip.File, size int64, raw *[]byte) []byte {
	if !gunzip.Available || zf.Method != zip.Deflate || size <= 0 {
		return nil
	}
	n := zf.CompressedSize64
	// Stored blocks cost 5 bytes per 65535: no encoder's output is larger than this.
	if n == 0 || n > uint64(size)+uint64(size)/64+1024 {
		return nil
	}
	off, err := zf.DataOffset()
	if err != nil {
		return nil
	}
	desc := 0
	if zf.Flags&0x8 != 0 {
		desc = 16 // the signature, CRC-32 and two 32-bit sizes: at most what archive/zip reads
	}
	if uint64(cap(*raw)) < n+uint64(desc) {
		*raw = make([]byte, n+uint64(desc))
	}
	buf := (*raw)[:n+uint64(desc)]
	if _, err := ra.ReadAt(buf, off); err != nil {
		return nil
	}
	if desc > 0 {
		d := buf[n:]
		if binary.LittleEndian.Uint32(d) == 0x08074b50 { // the descriptor's optional signature
			d = d[4:]
		}
		if binary.LittleEndian.Uint32(d) != zf.CRC32 {
			return nil
		}
	}
	dst := make([]byte, size)
	if !gunzip.Deflated(dst, buf[:n], zf.CRC32) {
		return nil
	}
	inflatedHeld.Add(1)
	return dst
}

// inflatedHeld counts the members inflateHeld inflated (for tests).
var inflatedHeld atomic.Int64

// dataDest maps "<key>/<rest>" under <name>-<ver>.data to its place in the tree.
func (p *plan) dataDest(member, sub string) (dest string, kind int, err error) {
	key, rest, ok := strings.Cut(sub, "/")
	if !ok {
		return "", 0, fmt.Errorf("%w: %s: .data content must be in <scheme>/<path>", ErrBadWheel, member)
	}
	switch key {
	case "purelib", "platlib":
		return path.Join("site-packages", rest), kindLib, nil
	case "scripts":
		return path.Join("bin", rest), kindScript, nil
	case "headers":
		return path.Join("include", headersName(p.fn), rest), kindOther, nil
	case "data":
		return path.Join("data", rest), kindOther, nil
	}
	return "", 0, fmt.Errorf("%w: %s: unknown .data directory %q (want purelib, platlib, scripts, headers or data)", ErrBadWheel, member, key)
}

// headersName is the directory under include/ that pip uses for a wheel's headers: the
// name from the file name with "_" as "-".
func headersName(fn Filename) string { return strings.ReplaceAll(fn.Name, "_", "-") }
