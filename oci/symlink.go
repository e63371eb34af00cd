package oci

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// CheckSymlink reports whether a symbolic link named name (a clean, relative,
// slash-separated path inside a tree) with target target stays inside that
// tree wherever the tree is put. The target must be non-empty, relative,
// valid UTF-8 without NUL or backslash, and already clean (path.Clean leaves
// it unchanged), so ".." can only lead it: "../lib/x" but never "a/../b".
// Its leading ".." may climb at most to the tree's root from name's
// directory. Because the rest of the target has no "..", following it
// through other links that pass this check can never leave the tree either,
// which a purely lexical check of "a/../.." could not guarantee.
//
// The host cache applies the same rule when it unpacks interpreter trees.
func CheckSymlink(name, target string) error {
	switch {
	case target == "":
		return errors.New("symlink has an empty target")
	case !utf8.ValidString(target) || strings.ContainsAny(target, "\x00\\"):
		return fmt.Errorf("symlink target %q is not valid UTF-8 or holds NUL or a backslash", target)
	case strings.HasPrefix(target, "/"):
		return fmt.Errorf("symlink target %q is absolute; only relative targets inside the tree are allowed", target)
	case path.Clean(target) != target:
		return fmt.Errorf("symlink target %q is not clean (it cleans to %q)", target, path.Clean(target))
	}
	if name == "" || path.Clean(name) != name || strings.HasPrefix(name, "/") || name == "." || name == ".." || strings.HasPrefix(name, "../") {
		return fmt.Errorf("symlink name %q is not a clean relative path inside the tree", name)
	}
	depth := strings.Count(name, "/") // directories between the root and the link
	up := 0
	for rest := target; rest == ".." || strings.HasPrefix(rest, "../"); up++ {
		rest = strings.TrimPrefix(strings.TrimPrefix(rest, ".."), "/")
	}
	if up > depth {
		return fmt.Errorf("symlink target %q leaves the tree", target)
	}
	return nil
}
