package index

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// dist is one distribution file of the served directory. Computed fields
// are valid for the (size, mtime) they were computed for.
type dist struct {
	name, project, version string
	kind                   distKind
	size                   int64
	mtime                  time.Time

	hashed  bool
	sha256  string
	meta    []byte // wheel METADATA, nil when unreadable or not a wheel
	metaSum string
	reqPy   string
}

// store scans a directory through an os.Root, so neither names nor
// symlinks can reach outside it.
type store struct {
	root    *os.Root
	maxMeta int64

	mu       sync.Mutex
	scanned  bool
	dirMtime time.Time
	dists    map[string]*dist    // by file name
	projects map[string][]string // normalized project -> sorted file names
}

// openRegular opens name for reading without blocking on FIFOs and checks
// that it is a regular file.
func (s *store) openRegular(name string) (*os.File, fs.FileInfo, error) {
	f, err := s.root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("%s: not a regular file", name)
	}
	return f, fi, nil
}

// refresh rescans the directory when its mtime changed.
func (s *store) refresh() error {
	st, err := s.root.Stat(".")
	if err != nil {
		return fmt.Errorf("stat of served directory: %w", err)
	}
	s.mu.Lock()
	fresh := s.scanned && st.ModTime().Equal(s.dirMtime)
	s.mu.Unlock()
	if fresh {
		return nil
	}
	d, err := s.root.Open(".")
	if err != nil {
		return fmt.Errorf("reading served directory: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("reading served directory: %w", err)
	}
	dists := map[string]*dist{}
	projects := map[string][]string{}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range names {
		if !safeFilename(n) {
			continue
		}
		project, version, kind, ok := parseDistFilename(n)
		if !ok {
			continue
		}
		fi, err := s.root.Stat(n) // follows symlinks only within the root
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		d := s.dists[n]
		if d == nil || d.size != fi.Size() || !d.mtime.Equal(fi.ModTime()) {
			d = &dist{name: n, project: project, version: version, kind: kind, size: fi.Size(), mtime: fi.ModTime()}
		}
		dists[n] = d
		projects[project] = append(projects[project], n)
	}
	for _, v := range projects {
		sort.Strings(v)
	}
	s.dists, s.projects, s.dirMtime, s.scanned = dists, projects, st.ModTime(), true
	return nil
}

// projectNames returns the sorted normalized project names.
func (s *store) projectNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.projects))
	for p := range s.projects {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// lookup returns the current dist for a file name.
func (s *store) lookup(name string) *dist {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dists[name]
}

// listing is a dist with its hash and metadata computed and its yanked
// state read.
type listing struct {
	*dist
	yanked bool
	reason string
}

// files returns the hashed files of a project; ok is false if the project
// is unknown. Files that cannot be read are left out.
func (s *store) files(project string) ([]listing, bool) {
	s.mu.Lock()
	names, ok := s.projects[project]
	names = append([]string(nil), names...)
	s.mu.Unlock()
	var out []listing
	for _, n := range names {
		d, err := s.hashed(n)
		if err != nil {
			continue
		}
		l := listing{dist: d}
		if b, err := s.readSidecar(n + ".yanked"); err == nil {
			l.yanked, l.reason = true, strings.TrimSpace(string(b))
		}
		out = append(out, l)
	}
	return out, ok
}

func (s *store) readSidecar(name string) ([]byte, error) {
	f, _, err := s.openRegular(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readCapped(f, 64<<10)
}

// hashed returns the dist for name with sha256 and metadata computed for
// the file's current size and mtime (recomputed when they changed).
func (s *store) hashed(name string) (*dist, error) {
	f, fi, err := s.openRegular(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s.mu.Lock()
	cur := s.dists[name]
	s.mu.Unlock()
	if cur == nil {
		return nil, fs.ErrNotExist
	}
	if cur.hashed && cur.size == fi.Size() && cur.mtime.Equal(fi.ModTime()) {
		return cur, nil
	}
	d := &dist{name: cur.name, project: cur.project, version: cur.version, kind: cur.kind,
		size: fi.Size(), mtime: fi.ModTime(), hashed: true}
	h := sha256.New()
	if n, err := io.Copy(h, f); err != nil {
		return nil, fmt.Errorf("hashing %s: %w", name, err)
	} else if n != d.size {
		return nil, fmt.Errorf("hashing %s: file changed while reading", name)
	}
	d.sha256 = hex.EncodeToString(h.Sum(nil))
	if d.kind == kindWheel {
		if zr, err := zip.NewReader(f, d.size); err == nil {
			if md, err := wheelMetadata(zr, s.maxMeta); err == nil {
				sum := sha256.Sum256(md)
				d.meta, d.metaSum, d.reqPy = md, hex.EncodeToString(sum[:]), requiresPython(md)
			}
		}
	}
	if after, err := f.Stat(); err != nil || after.Size() != d.size || !after.ModTime().Equal(d.mtime) {
		return nil, fmt.Errorf("hashing %s: file changed while reading", name)
	}
	s.mu.Lock()
	if s.dists[name] == cur {
		s.dists[name] = d
	}
	s.mu.Unlock()
	return d, nil
}

// metadata returns the cached METADATA of a wheel.
func (s *store) metadata(name string) ([]byte, error) {
	d, err := s.hashed(name)
	if err != nil {
		return nil, err
	}
	if d.meta == nil {
		return nil, errors.New("no metadata")
	}
	return bytes.Clone(d.meta), nil
}
