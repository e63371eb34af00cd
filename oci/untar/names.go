package untar

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// CheckName validates a path inside an archive (a directory's without its
// trailing '/'): non-empty, valid UTF-8 without NUL, backslash or control
// characters, relative, clean, and without "..". A tree's file list obeys the
// same rule.
func CheckName(name string) error {
	switch {
	case name == "", name == ".":
		return errors.New(`empty name, or "."`)
	case !utf8.ValidString(name):
		return errors.New("name is not valid UTF-8")
	case strings.ContainsRune(name, 0):
		return errors.New("name contains NUL")
	case strings.ContainsRune(name, '\\'):
		return errors.New(`name contains a backslash`)
	case strings.HasPrefix(name, "/"):
		return errors.New("absolute path")
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f {
			return errors.New("name contains a control character")
		}
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return errors.New(`path contains ".."`)
		}
	}
	if path.Clean(name) != name {
		return fmt.Errorf("path is not clean (it cleans to %q)", path.Clean(name))
	}
	return nil
}

// PAX limits: records beyond the standard ones are refused, and these bound the rest.
const (
	maxPAXRecords = 16
	maxPAXBytes   = 16 << 10 // keys and values of one header together
)

// paxKeys are the POSIX PAX keys archive/tar turns into header fields (plus
// "comment", which means nothing). Vendor records (SCHILY.xattr.*, GNU.sparse.*,
// LIBARCHIVE.*) and "hdrcharset" (names that are not UTF-8) are refused: what is
// not understood is not unpacked.
var paxKeys = map[string]bool{
	"path": true, "linkpath": true, "size": true, "uid": true, "gid": true,
	"uname": true, "gname": true, "mtime": true, "atime": true, "ctime": true, "comment": true,
}

func checkPAX(records map[string]string) error {
	if len(records) > maxPAXRecords {
		return fmt.Errorf("%d PAX records, the limit is %d", len(records), maxPAXRecords)
	}
	n := 0
	for k, v := range records {
		if !paxKeys[k] {
			return fmt.Errorf("PAX record %.64q is not one of the standard keys", k)
		}
		if !utf8.ValidString(v) || strings.ContainsRune(v, 0) {
			return fmt.Errorf("PAX record %q is not valid UTF-8 or holds NUL", k)
		}
		n += len(k) + len(v)
	}
	if n > maxPAXBytes {
		return fmt.Errorf("PAX records of %d bytes, the limit is %d", n, maxPAXBytes)
	}
	return nil
}
