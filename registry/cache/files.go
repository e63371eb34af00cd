package cache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"

	"github.com/cespare/xxhash/v2"

	"github.com/pylayer/pylayer/internal/fsx"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
)

// filesSuffix names a tree's manifest: trees/sha256/<hex>.files.
const filesSuffix = ".files"

// maxFilesBytes bounds a .files manifest (100k entries of a few hundred bytes).
const maxFilesBytes = 64 << 20

// record is one entry of a tree: a directory or a regular file.
type record struct {
	Path   string `json:"path"`
	Dir    bool   `json:"dir,omitempty"`
	Mode   uint32 `json:"mode"`
	Size   int64  `json:"size,omitempty"`
	XXH64  string `json:"xxh64,omitempty"`  // a file's content hash (version 2)
	SHA256 string `json:"sha256,omitempty"` // a file's content hash in a version 1 list
	Link   string `json:"link,omitempty"`   // symlink target (interpreter trees only)
}

// filesManifest is what a tree must contain, written when it is unpacked:
// re-tarring a tree cannot cheaply be compared to its blob digest, the file
// hashes can.
//
// Why XXH64 and not sha256 for the files (version 2; version 1 lists, with
// sha256, are still read and checked): the list guards a tree against change
// after it was unpacked (a disk error, a stray write by root, a half-done
// repair), which doctor reports. It is no defence against someone who can
// write the cache, who can rewrite the list beside the tree as well, so a
// cryptographic hash buys nothing here; the tree's trust comes from its blob's
// digest, checked before it is unpacked. A 64-bit XXH64 misses an accidental
// change with odds of 2^-64 and costs an eighth of sha256 with SHA-NI (8.5 ms
// against 68 ms for the 9,452 files, 121 MB, of the pull bench's set), which
// was 5% of a cold pull. github.com/cespare/xxhash/v2 is the Go XXH64 most
// projects use (Prometheus, etcd); XXH3 (github.com/zeebo/xxh3) is a little
// faster but detects the CPU with klauspost/cpuid at init, 0.4 ms of every
// command's start here.
type filesManifest struct {
	Version int       `json:"version"`
	Blob    string    `json:"blob"`
	Entries []*record `json:"entries"`
}

// filesVersion is the version marshalFiles writes: 2, file content hashed
// with XXH64 (newContentHash).
const filesVersion = 2

// newContentHash makes the hash of a file's content in a version 2 list.
func newContentHash() hash.Hash { return xxhash.New() }

func marshalFiles(blob digest.Digest, recs []record) ([]byte, error) {
	m := filesManifest{Version: filesVersion, Blob: string(blob), Entries: make([]*record, len(recs))}
	for i := range recs {
		m.Entries[i] = &recs[i]
	}
	return json.Marshal(m)
}

// parseFiles decodes and checks a .files manifest of blob: strictly sorted,
// unique, clean paths whose parents are listed before them, directories 0555,
// files 0444 or 0555 with a size and the hash of their version (2: xxh64, 1:
// sha256).
func parseFiles(b []byte, blob digest.Digest) ([]record, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: file list of %s: %s", ErrInvalidCache, blob, fmt.Sprintf(format, args...))
	}
	if len(b) > maxFilesBytes {
		return nil, bad("%d bytes, the limit is %d", len(b), maxFilesBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m filesManifest
	if err := dec.Decode(&m); err != nil {
		return nil, bad("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("trailing data")
	}
	if m.Version != 1 && m.Version != 2 {
		return nil, bad("version %d, want 1 or 2", m.Version)
	}
	if m.Blob != string(blob) {
		return nil, bad("it is the file list of %q", m.Blob)
	}
	dirs := map[string]bool{}
	recs := make([]record, 0, len(m.Entries))
	for i, r := range m.Entries {
		if r == nil {
			return nil, bad("entry %d is null", i)
		}
		if err := checkName(r.Path); err != nil {
			return nil, bad("entry %q: %v", r.Path, err)
		}
		if i > 0 && m.Entries[i-1].Path >= r.Path {
			return nil, bad("entry %q is out of order or repeated", r.Path)
		}
		if parent := path.Dir(r.Path); parent != "." && !dirs[parent] {
			return nil, bad("entry %q comes without its directory", r.Path)
		}
		switch {
		case r.Link != "":
			if r.Dir || r.Mode != modeLink || r.Size != 0 || r.SHA256 != "" || r.XXH64 != "" {
				return nil, bad("symlink %q: mode %#o, size %d, hash %q; want mode %#o only", r.Path, r.Mode, r.Size, r.SHA256+r.XXH64, modeLink)
			}
			if err := oci.CheckSymlink(r.Path, r.Link); err != nil {
				return nil, bad("symlink %q: %v", r.Path, err)
			}
		case r.Dir:
			if r.Mode != modeDir || r.Size != 0 || r.SHA256 != "" || r.XXH64 != "" || r.Link != "" {
				return nil, bad("directory %q: mode %#o, size %d, hash %q; want mode %#o only", r.Path, r.Mode, r.Size, r.SHA256+r.XXH64, modeDir)
			}
			dirs[r.Path] = true
		default:
			hashed := m.Version == 1 && isHex(r.SHA256, 64) && r.XXH64 == "" || m.Version == 2 && isHex(r.XXH64, 16) && r.SHA256 == ""
			if r.Mode != modeFile && r.Mode != modeExec || r.Size < 0 || !hashed {
				return nil, bad("file %q: mode %#o, size %d, xxh64 %q, sha256 %q (version %d)", r.Path, r.Mode, r.Size, r.XXH64, r.SHA256, m.Version)
			}
		}
		recs = append(recs, *r)
	}
	if len(recs) == 0 {
		return nil, bad("no entries")
	}
	return recs, nil
}

// readFiles reads and parses the .files manifest of the tree of blob hex.
func (c *Cache) readFiles(hex string) ([]record, error) {
	f, err := os.Open(c.treeFiles(hex))
	if err != nil {
		return nil, fmt.Errorf("reading the file list of tree %s: %w", hex, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFilesBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the file list of tree %s: %w", hex, err)
	}
	return parseFiles(b, digest.NewDigestFromEncoded(digest.SHA256, hex))
}

// treeBytes is the apparent size of a tree: the sum of its file sizes.
func treeBytes(recs []record) int64 {
	var n int64
	for _, r := range recs {
		n += r.Size
	}
	return n
}

// sealDirs makes the directories below dir (not dir itself: renaming a
// directory to another parent needs write access to it) read-only, deepest
// first. dirs are paths relative to dir.
func sealDirs(dir string, dirs []string) error {
	sorted := append([]string(nil), dirs...)
	sort.Sort(sort.Reverse(sort.StringSlice(sorted)))
	for _, d := range sorted {
		p := filepath.Join(dir, filepath.FromSlash(d))
		if err := os.Chmod(p, modeDir); err != nil {
			return fmt.Errorf("making %q read-only: %w", p, err)
		}
	}
	return nil
}

// syncFS flushes the file system that holds dir (see durable) with one
// syncfs(2), which costs far less than an fsync per file and directory: an
// install calls it once, for its new trees and its layer together.
func syncFS(ctx context.Context, dir string) error {
	testHook("syncfs")
	if !durable {
		return nil
	}
	return fsx.SyncFS(ctx, dir)
}

func dirsOf(recs []record) []string {
	var dirs []string
	for _, r := range recs {
		if r.Dir {
			dirs = append(dirs, r.Path)
		}
	}
	return dirs
}

// verifyTree compares the tree at dir with recs: the same paths, types and
// modes, and every file's size and hash. It returns the differences. With shared,
// dir is a layer root that holds other blobs' paths too (the tree's home), and
// paths that recs does not name are not looked at.
func verifyTree(dir string, recs []record, shared bool) ([]string, error) {
	want := make(map[string]record, len(recs))
	for _, r := range recs {
		want[r.Path] = r
	}
	var problems []string
	seen := map[string]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		seen[rel] = true
		r, ok := want[rel]
		if !ok && shared {
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if !ok {
			problems = append(problems, fmt.Sprintf("%s: not in the file list", rel))
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case r.Dir && !info.IsDir(), !r.Dir && (r.Link == "") != info.Mode().IsRegular():
			problems = append(problems, fmt.Sprintf("%s: is a %s", rel, kindOf(info.Mode())))
			if info.IsDir() {
				return fs.SkipDir
			}
			return nil
		case r.Link != "":
			if target, err := os.Readlink(p); err != nil || target != r.Link {
				problems = append(problems, fmt.Sprintf("%s: link changed (to %q; want %q)", rel, target, r.Link))
			}
			return nil
		case uint32(info.Mode().Perm()) != r.Mode || info.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0:
			problems = append(problems, fmt.Sprintf("%s: mode %v, want %v", rel, info.Mode(), fs.FileMode(r.Mode)))
		}
		if r.Dir {
			return nil
		}
		alg, want, h := "xxh64", r.XXH64, newContentHash()
		if r.SHA256 != "" {
			alg, want, h = "sha256", r.SHA256, sha256.New()
		}
		sum, n, err := hashFile(p, h)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", rel, err))
		} else if n != r.Size || sum != want {
			problems = append(problems, fmt.Sprintf("%s: content changed (%d bytes, %s %s; want %d bytes, %s %s)", rel, n, alg, sum, r.Size, alg, want))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if !seen[r.Path] {
			problems = append(problems, fmt.Sprintf("%s: missing", r.Path))
		}
	}
	return problems, nil
}

// hashFile hashes the content of file p with h.
func hashFile(p string, h hash.Hash) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// writeReadOnly writes a file that must never change: 0444, fsynced.
func writeReadOnly(p string, content []byte) error {
	return writeFileMode(p, content, modeFile, true)
}

// writeFileMode writes a new file with mode, fsynced if sync is set (else a
// syncfs must cover it before it is renamed into view).
func writeFileMode(p string, content []byte, mode os.FileMode, sync bool) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(content)
	if err == nil {
		err = f.Chmod(mode)
	}
	if err == nil && sync {
		err = fsync(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// fixTop makes the top directory of a tree or layer read-only. It is left
// writable between its rename into place and the chmod that follows (moving
// a directory to another parent needs write access to it), so a crash in
// that window leaves it 0755; the next use repairs that.
func fixTop(dir string) bool {
	if fi, err := os.Lstat(dir); err == nil && fi.IsDir() && fi.Mode().Perm() != modeDir {
		return os.Chmod(dir, modeDir) == nil
	}
	return false
}

// moveSealed renames the finished directory src to dst with its top directory
// read-only (modeDir) from the moment it is visible, so that a crash never leaves a
// writable tree or layer in place. Moving a directory to another parent needs write
// permission on it, which root does not need but other users do: for them the
// directory is made read-only right after the rename, and fixTop repairs a crash in
// between.
func moveSealed(src, dst string) error {
	if err := os.Chmod(src, modeDir); err != nil {
		return err
	}
	err := os.Rename(src, dst)
	if errors.Is(err, fs.ErrPermission) {
		if err := os.Chmod(src, 0o755); err != nil {
			return err
		}
		if err = os.Rename(src, dst); err == nil {
			err = os.Chmod(dst, modeDir)
		}
	}
	return err
}
