package wheel

import (
	"archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"
)

// ErrBadMetadata reports core metadata that cannot be used: not UTF-8, or no Name or
// Version.
var ErrBadMetadata = errors.New("malformed wheel metadata")

// Metadata is the part of a wheel's core metadata (METADATA) that pylayer uses. Values
// are exactly what Python's email.parser (compat32 policy, as pip uses it) returns.
type Metadata struct {
	Name, Version, RequiresPython string
	RequiresDist, ProvidesExtra   []string
	MetadataVersion               string
}

// header is one parsed header field.
type header struct{ name, value string }

// headers are parsed RFC 822 style header fields, in file order.
type headers []header

// get is the first value of the field, matched case-insensitively, like Message.get.
func (h headers) get(name string) (string, bool) {
	for _, f := range h {
		if strings.EqualFold(f.name, name) {
			return f.value, true
		}
	}
	return "", false
}

// all is every value of the field in order, like Message.get_all.
func (h headers) all(name string) []string {
	var out []string
	for _, f := range h {
		if strings.EqualFold(f.name, name) {
			out = append(out, f.value)
		}
	}
	return out
}

// splitLines splits s after each "\r\n", "\r" or "\n", keeping the terminators, as the
// email feed parser does.
func splitLines(s string) []string {
	var lines []string
	for len(s) > 0 {
		i := strings.IndexAny(s, "\r\n")
		if i < 0 {
			lines = append(lines, s)
			break
		}
		end := i + 1
		if s[i] == '\r' && end < len(s) && s[end] == '\n' {
			end++
		}
		lines = append(lines, s[:end])
		s = s[end:]
	}
	return lines
}

// isHeaderLine is the email parser's headerRE: ^(From |[\041-\071\073-\176]*:|[\t ]).
func isHeaderLine(line string) bool {
	if strings.HasPrefix(line, "From ") || line[0] == ' ' || line[0] == '\t' {
		return true
	}
	for i := 0; i < len(line); i++ {
		c := line[i]
		if c == ':' {
			return true
		}
		if c < 0x21 || c > 0x7e {
			return false
		}
	}
	return false
}

// parseHeaders parses the header block of s with the semantics of Python's
// email.parser.Parser (compat32 policy): continuation lines are appended verbatim,
// repeated fields are kept, and parsing stops at the first line that is neither a field
// nor a continuation (the body, which is ignored).
func parseHeaders(s string) headers {
	all := splitLines(s)
	var lines []string
	for _, l := range all {
		if !isHeaderLine(l) {
			break
		}
		lines = append(lines, l)
	}
	var out headers
	var cur []string
	flush := func() {
		if cur == nil {
			return
		}
		name, value, _ := strings.Cut(cur[0], ":")
		value = strings.TrimLeft(value, " \t") + strings.Join(cur[1:], "")
		out = append(out, header{name, strings.TrimRight(value, "\r\n")})
		cur = nil
	}
	for _, line := range lines {
		if line[0] == ' ' || line[0] == '\t' {
			if cur != nil { // a continuation on the first line is ignored
				cur = append(cur, line)
			}
			continue
		}
		flush()
		if strings.HasPrefix(line, "From ") {
			// A Unix "From " envelope line: skipped on the first line, the start of
			// the body on the last, ignored elsewhere. None of that is a field.
			continue
		}
		if line[0] == ':' { // missing header name: ignored
			continue
		}
		cur = []string{line}
	}
	flush()
	return out
}

// Fields are the header fields of core metadata, in file order, as Python's email.parser
// (compat32) reads them: a continued field keeps its continuation lines verbatim.
type Fields struct{ h headers }

// ParseFields parses the header block of core metadata (METADATA or PKG-INFO), as
// ParseMetadata does, for callers that need fields it does not keep (License, Summary,
// Classifier ...). Bytes are taken as they are: validating UTF-8 is the caller's choice.
func ParseFields(b []byte) Fields { return Fields{parseHeaders(string(b))} }

// Get is the first value of the field, matched ignoring case; "" when there is none.
func (f Fields) Get(name string) string {
	v, _ := f.h.get(name)
	return v
}

// All is every value of the field, in order.
func (f Fields) All(name string) []string { return f.h.all(name) }

// ParseMetadata parses core metadata (METADATA or PKG-INFO). Name and Version must be
// present and non-empty.
func ParseMetadata(b []byte) (*Metadata, error) {
	if !utf8.Valid(b) {
		return nil, fmt.Errorf("%w: not valid UTF-8", ErrBadMetadata)
	}
	h := parseHeaders(string(b))
	m := &Metadata{
		RequiresDist:  h.all("Requires-Dist"),
		ProvidesExtra: h.all("Provides-Extra"),
	}
	m.Name, _ = h.get("Name")
	m.Version, _ = h.get("Version")
	m.RequiresPython, _ = h.get("Requires-Python")
	m.MetadataVersion, _ = h.get("Metadata-Version")
	if m.Name == "" {
		return nil, fmt.Errorf("%w: no Name field", ErrBadMetadata)
	}
	if m.Version == "" {
		return nil, fmt.Errorf("%w: no Version field", ErrBadMetadata)
	}
	return m, nil
}

// maxMetadataBytes bounds METADATA (long descriptions included) when it is read.
const maxMetadataBytes = 16 << 20

// ReadMetadata reads and parses the METADATA of the wheel at wheelPath, returning it and
// its raw bytes. The wheel must have exactly one top-level .dist-info directory.
func ReadMetadata(wheelPath string) (*Metadata, []byte, error) {
	f, err := os.Open(wheelPath)
	if err != nil {
		return nil, nil, fmt.Errorf("reading metadata: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("reading metadata: %w", err)
	}
	zr, err := zip.NewReader(f, st.Size())
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) {
		return nil, nil, fmt.Errorf("%w: %s is not a zip archive: %v", ErrBadWheel, wheelPath, err)
	}
	di, err := findDistInfo(zr.File)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", wheelPath, err)
	}
	want := di + "/METADATA"
	var member *zip.File
	for _, zf := range zr.File {
		if zf.Name == want {
			if member != nil {
				return nil, nil, fmt.Errorf("%w: %s: duplicate member %s", ErrBadWheel, wheelPath, want)
			}
			member = zf
		}
	}
	if member == nil {
		return nil, nil, fmt.Errorf("%w: %s has no %s", ErrBadWheel, wheelPath, want)
	}
	raw, err := readSmall(member, maxMetadataBytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", wheelPath, err)
	}
	m, err := ParseMetadata(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %s: %w", wheelPath, want, err)
	}
	return m, raw, nil
}

// findDistInfo returns the one top-level directory whose name ends in ".dist-info".
func findDistInfo(files []*zip.File) (string, error) {
	seen := map[string]bool{}
	var dirs []string
	for _, zf := range files {
		top, _, ok := strings.Cut(zf.Name, "/")
		if !ok || !strings.HasSuffix(top, ".dist-info") || seen[top] {
			continue
		}
		seen[top] = true
		dirs = append(dirs, top)
	}
	switch len(dirs) {
	case 0:
		return "", fmt.Errorf("%w: no .dist-info directory", ErrBadWheel)
	case 1:
		return dirs[0], nil
	default:
		return "", fmt.Errorf("%w: more than one .dist-info directory: %s", ErrBadWheel, strings.Join(dirs, ", "))
	}
}

// readSmall reads a whole member that must be at most limit bytes, not trusting the
// sizes in the zip headers.
func readSmall(zf *zip.File, limit int64) ([]byte, error) {
	if zf.UncompressedSize64 > uint64(limit) {
		return nil, fmt.Errorf("%w: %s is %d bytes, limit %d", ErrTooLarge, zf.Name, zf.UncompressedSize64, limit)
	}
	rc, err := zf.Open()
	if err != nil {
		return nil, fmt.Errorf("%w: opening %s: %v", ErrBadWheel, zf.Name, err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%w: inflating %s: %v", ErrBadWheel, zf.Name, err)
	}
	if n > limit {
		return nil, fmt.Errorf("%w: %s inflates past %d bytes", ErrTooLarge, zf.Name, limit)
	}
	return buf.Bytes(), nil
}
