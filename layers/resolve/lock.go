package resolve

import (
	"context"
	"fmt"
	"os"

	"golang.org/x/sync/errgroup"

	"github.com/pylayer/pylayer/layers/index"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/pep440"
	"github.com/pylayer/pylayer/layers/pep508"
	"github.com/pylayer/pylayer/layers/target"
)

// Wheelhouse puts a locked wheel on the host, hash checked, and returns its path;
// *build.Builder is one. NewLock asks it only for the size of a wheel that neither its
// index entry (PEP 503 HTML has no sizes) nor the reading of its metadata (range
// answers name the file's size; a metadata cache hit reads nothing) gave, so that the
// build that follows finds it there.
type Wheelhouse interface {
	Wheel(ctx context.Context, p lock.Package) (string, error)
}

// LockSpec is what a lock is made from: what to resolve, for what, over what.
type LockSpec struct {
	Kind   lock.Kind
	Target target.Target
	// Base is the base lock of an ext layer: its key is recorded and its pins kept (the
	// result never holds a package of the base). Nil for base and iso layers.
	Base *lock.Lock
	// Requirements are resolved; Record is what the lock records as its requirements
	// (nil: the String of each of Requirements).
	Requirements []pep508.Requirement
	Record       []string
	Constraints  []pep508.Requirement // recorded, and narrow versions; never add a package
	Pre          bool
	// Pinned are packages fixed already (an uploaded wheel): added as they are, never
	// resolved; a resolution's own choice for one of their names is dropped.
	Pinned []lock.Package
}

// NewLock resolves spec against idx and returns the valid lock of the result. Every
// resolved file must have a sha256; a size the index does not give is the one reading
// the file's metadata found (Content-Range of its range answers, or the whole file), else
// that of the wheel wh fetches (hash checked), so that a plain PEP 503 index locks the
// same wherever it is locked from. A pinned package that an ext layer's base holds is a
// *ConflictError. Errors of wh (index.ErrHashMismatch) are returned wrapped.
func NewLock(ctx context.Context, idx Index, wh Wheelhouse, spec LockSpec) (*lock.Lock, error) {
	l := &lock.Lock{Version: lock.FormatVersion, Kind: spec.Kind, Target: spec.Target, Requirements: spec.Record}
	if spec.Record == nil {
		for _, r := range spec.Requirements {
			l.Requirements = append(l.Requirements, r.String())
		}
	}
	for _, c := range spec.Constraints {
		l.Constraints = append(l.Constraints, c.String())
	}
	opts := Options{Target: spec.Target, Constraints: spec.Constraints, Pre: spec.Pre}
	if spec.Base != nil {
		key, err := spec.Base.ResolutionKey() // what was resolved, whoever compiled its .pyc
		if err != nil {
			return nil, err
		}
		l.Base = key
		if opts.Base, err = Pins(spec.Base); err != nil {
			return nil, err
		}
		for _, p := range spec.Pinned {
			if spec.Base.Find(p.Name) != nil {
				return nil, &ConflictError{Project: p.Name}
			}
		}
	}
	resolved, err := Resolve(ctx, idx, spec.Requirements, opts)
	if err != nil {
		return nil, err
	}
	pinned := map[string]bool{}
	for _, p := range spec.Pinned {
		pinned[p.Name] = true
	}
	var todo []Resolved
	for _, r := range resolved {
		if !pinned[r.Name] {
			todo = append(todo, r)
		}
	}
	// A wheel whose size is still unknown (a plain index, its metadata read from the
	// cache) is fetched whole, several at a time.
	pkgs := make([]lock.Package, len(todo))
	errs := make([]error, len(todo))
	var g errgroup.Group
	g.SetLimit(sizeFetches)
	for i, r := range todo {
		g.Go(func() error {
			pkgs[i], errs[i] = Package(ctx, wh, r)
			return nil
		})
	}
	g.Wait()
	for _, err := range errs { // the first in name order, whichever failed first
		if err != nil {
			return nil, err
		}
	}
	l.Packages = append(l.Packages, pkgs...)
	l.Packages = append(l.Packages, spec.Pinned...)
	if _, err := l.Canonical(); err != nil {
		return nil, err
	}
	return l, nil
}

// sizeFetches is how many wheels NewLock fetches at once for their sizes.
const sizeFetches = 4

// Package is the lock entry of one resolved wheel. The index must give its sha256; its
// size, when the index does not say, is that of the wheel wh fetches (hash checked).
func Package(ctx context.Context, wh Wheelhouse, r Resolved) (lock.Package, error) {
	p := lock.Package{Name: r.Name, Version: r.Version.String(), Filename: r.File.Filename, URL: r.File.URL,
		SHA256: r.File.SHA256, Size: r.File.Size, RequiredBy: r.RequiredBy}
	if p.SHA256 == "" {
		return p, fmt.Errorf("the index gives no sha256 for %s: pylayer only locks files with hashes (serve it with #sha256= fragments or PEP 691 JSON)", p.Filename)
	}
	if p.Size > 0 {
		return p, nil
	}
	if wh == nil {
		return p, fmt.Errorf("the index gives no size for %s and no wheelhouse was given to fetch it into", p.Filename)
	}
	path, err := wh.Wheel(ctx, p)
	if err != nil {
		return p, fmt.Errorf("fetching %s for its size: %w", p.Filename, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return p, fmt.Errorf("fetching %s for its size: %w", p.Filename, err)
	}
	p.Size = fi.Size()
	return p, nil
}

// Pins are the packages of a base lock as pins an ext layer must live with.
func Pins(base *lock.Lock) ([]Pin, error) {
	var out []Pin
	for _, p := range base.Packages {
		v, err := pep440.Parse(p.Version)
		if err != nil {
			return nil, fmt.Errorf("base lock: %s %q: %w", p.Name, p.Version, err)
		}
		out = append(out, Pin{Name: p.Name, Version: v, File: index.File{Project: p.Name, Filename: p.Filename, URL: p.URL, SHA256: p.SHA256, Size: p.Size}})
	}
	return out, nil
}
