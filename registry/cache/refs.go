package cache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/pylayer/pylayer/oci/digest"
)

// ErrInvalidRef: a ref name cannot be stored.
var ErrInvalidRef = errors.New("invalid ref name")

// escapeRef turns a ref name ("127.0.0.1:5000/team/pylayer:current") into a
// file name: bytes outside [A-Za-z0-9._-] become %XX, and so does a leading
// '.', so the result is never ".", ".." or hidden. It is reversible.
func escapeRef(name string) (string, error) {
	if name == "" || !utf8.ValidString(name) {
		return "", fmt.Errorf("%w: %q: must be non-empty UTF-8", ErrInvalidRef, name)
	}
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if ch < 0x20 || ch == 0x7f {
			return "", fmt.Errorf("%w: %q contains a control character", ErrInvalidRef, name)
		}
		plain := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '_' || ch == '-' || ch == '.' && i > 0
		if plain {
			b.WriteByte(ch)
		} else {
			fmt.Fprintf(&b, "%%%02X", ch)
		}
	}
	if b.Len() > 255 {
		return "", fmt.Errorf("%w: %q is too long (%d bytes once escaped, the limit is 255)", ErrInvalidRef, name, b.Len())
	}
	return b.String(), nil
}

// unescapeRef reverses escapeRef; ok is false for names escapeRef never makes.
func unescapeRef(file string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(file); i++ {
		if file[i] != '%' {
			b.WriteByte(file[i])
			continue
		}
		if i+2 >= len(file) {
			return "", false
		}
		var ch byte
		if _, err := fmt.Sscanf(file[i+1:i+3], "%02X", &ch); err != nil {
			return "", false
		}
		b.WriteByte(ch)
		i += 2
	}
	name := b.String()
	if e, err := escapeRef(name); err != nil || e != file {
		return "", false
	}
	return name, true
}

// SetRef points the ref name at manifest digest d (atomically replacing what it
// pointed at). GC never removes a layer a ref points at.
func (c *Cache) SetRef(ctx context.Context, name string, d digest.Digest) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	file, err := escapeRef(name)
	if err != nil {
		return err
	}
	if err := checkDigest(d); err != nil {
		return fmt.Errorf("setting ref %q: %w", name, err)
	}
	err = c.replaceFile(ctx, filepath.Join(c.root, "refs", file), []byte(string(d)+"\n"))
	if err != nil {
		return fmt.Errorf("setting ref %q: %w", name, err)
	}
	return nil
}

// Ref returns the manifest digest the ref name points at (ErrNotFound if none).
func (c *Cache) Ref(ctx context.Context, name string) (digest.Digest, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	file, err := escapeRef(name)
	if err != nil {
		return "", err
	}
	return c.readRef(name, filepath.Join(c.root, "refs", file))
}

func (c *Cache) readRef(name, path string) (digest.Digest, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("ref %q: %w", name, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("reading ref %q: %w", name, err)
	}
	d := digest.Digest(strings.TrimSuffix(string(b), "\n"))
	if err := checkDigest(d); err != nil {
		return "", fmt.Errorf("%w: ref %q (%s) is damaged: %v; set it again", ErrInvalidCache, name, path, err)
	}
	return d, nil
}

// DeleteRef removes the ref name; removing a ref that does not exist is not an error.
func (c *Cache) DeleteRef(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	file, err := escapeRef(name)
	if err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(c.root, "refs", file)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("deleting ref %q: %w", name, err)
	}
	return syncDir(ctx, filepath.Join(c.root, "refs"))
}

// Refs returns every ref and the digest it points at. Files in refs/ that are
// not refs, or are damaged, are an error naming them.
func (c *Cache) Refs(ctx context.Context) (map[string]digest.Digest, error) {
	entries, err := os.ReadDir(filepath.Join(c.root, "refs"))
	if err != nil {
		return nil, fmt.Errorf("listing refs: %w", err)
	}
	refs := make(map[string]digest.Digest, len(entries))
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		name, ok := unescapeRef(e.Name())
		if !ok || !e.Type().IsRegular() {
			return nil, fmt.Errorf("%w: %s is not a ref written by pylayer: remove it", ErrInvalidCache, filepath.Join(c.root, "refs", e.Name()))
		}
		d, err := c.readRef(name, filepath.Join(c.root, "refs", e.Name()))
		if err != nil {
			return nil, err
		}
		refs[name] = d
	}
	return refs, nil
}
