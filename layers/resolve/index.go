package resolve

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/pylayer/pylayer/layers/index"
	"github.com/pylayer/pylayer/layers/pep440"
	"github.com/pylayer/pylayer/layers/pep508"
	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/layers/wheel"
)

// Index is what the resolver needs of a package index; *index.Client is one.
type Index interface {
	Files(ctx context.Context, project string) ([]index.File, error)
	Metadata(ctx context.Context, f index.File) ([]byte, error)
}

var _ Index = (*index.Client)(nil)

// sizer is an Index that can tell a file's size where its listing did not: index.Client
// knows it once it has read the file's metadata with range requests, or downloaded it.
type sizer interface {
	SizeOf(f index.File) int64
}

var _ sizer = (*index.Client)(nil)

// candidate is the best wheel of one version of a project for the target.
type candidate struct {
	version pep440.Version
	file    index.File
	rank    int
}

// project is what the index offers for one name, filtered to what the target can install.
type project struct {
	name   string
	cands  []candidate // every installable version, highest first
	sdists []string    // source-only files, for the error message
	unfit  []string    // wheels whose tags or requires-python rule them out
	err    error
	ready  chan struct{}
}

// catalog caches index answers for one resolution; safe for concurrent prefetch.
type catalog struct {
	idx    Index
	target target.Target
	python pep440.Version

	mu       sync.Mutex
	projects map[string]*project
	metas    map[string]*metaResult
	ahead    map[string]bool // projects whose likely pick's metadata was asked for ahead

	wg sync.WaitGroup // the loads running in the background, which Resolve waits for
}

type metaResult struct {
	meta  *wheel.Metadata
	deps  []pep508.Requirement
	err   error
	ready chan struct{}
}

// versionInfoRE takes sys.version_info[:3] out of a full Python version such as
// "3.13.0rc1" or "3.11.1+".
var versionInfoRE = regexp.MustCompile(`^[0-9]+(?:\.[0-9]+){0,2}`)

func newCatalog(idx Index, t target.Target) (*catalog, error) {
	full := t.PythonFull
	if full == "" {
		full = t.Python
	}
	// pip checks Requires-Python against version_info[:3], never the pre-release or
	// local part: 3.13.0rc1 satisfies ">=3.13".
	py, err := pep440.Parse(versionInfoRE.FindString(full))
	if err != nil {
		return nil, fmt.Errorf("target python version %q: %w", full, err)
	}
	return &catalog{idx: idx, target: t, python: py, projects: map[string]*project{}, metas: map[string]*metaResult{},
		ahead: map[string]bool{}}, nil
}

// prefetch starts loading a project's file list in the background.
func (c *catalog) prefetch(ctx context.Context, name string) {
	c.mu.Lock()
	_, ok := c.projects[name]
	if !ok {
		p := &project{name: name, ready: make(chan struct{})}
		c.projects[name] = p
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.load(ctx, p)
		}()
	}
	c.mu.Unlock()
}

func (c *catalog) project(ctx context.Context, name string) (*project, error) {
	c.prefetch(ctx, name)
	c.mu.Lock()
	p := c.projects[name]
	c.mu.Unlock()
	select {
	case <-p.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return p, p.err
}

func (c *catalog) load(ctx context.Context, p *project) {
	defer close(p.ready)
	files, err := c.idx.Files(ctx, p.name)
	if err != nil {
		if errors.Is(err, index.ErrNotFound) {
			p.err = fmt.Errorf("%w: %s (check the spelling, or that the index serves it)", ErrNotFound, p.name)
		} else {
			p.err = fmt.Errorf("listing %s: %w", p.name, err)
		}
		return
	}
	best := map[string]candidate{}
	for _, f := range files {
		if wheel.IsSdistFilename(f.Filename) {
			p.sdists = append(p.sdists, f.Filename)
			continue
		}
		fn, err := wheel.ParseFilename(f.Filename)
		if err != nil || fn.Project() != p.name {
			continue // pip ignores files it cannot parse or that name another project
		}
		v, err := pep440.Parse(fn.Version)
		if err != nil {
			continue
		}
		var tags []target.Tag
		for _, t := range fn.TagTriples() {
			tags = append(tags, target.Tag{Interpreter: t[0], ABI: t[1], Platform: t[2]})
		}
		rank := c.target.BestRank(tags)
		if rank < 0 {
			p.unfit = append(p.unfit, f.Filename+" (not for this platform)")
			continue
		}
		if !c.pythonOK(f.RequiresPython) {
			p.unfit = append(p.unfit, f.Filename+" (requires Python "+f.RequiresPython+")")
			continue
		}
		key := v.String()
		old, seen := best[key]
		// pip prefers, within one version: not yanked, then the best tag, then the highest build tag.
		if !seen || better(f, rank, fn.Build, old) {
			best[key] = candidate{version: v, file: f, rank: rank}
		}
	}
	for _, cand := range best {
		p.cands = append(p.cands, cand)
	}
	sort.Slice(p.cands, func(i, j int) bool { return p.cands[i].version.Compare(p.cands[j].version) > 0 })
}

func better(f index.File, rank int, build string, old candidate) bool {
	if f.Yanked != old.file.Yanked {
		return !f.Yanked
	}
	if rank != old.rank {
		return rank < old.rank
	}
	oldFn, _ := wheel.ParseFilename(old.file.Filename)
	return buildLess(oldFn.Build, build)
}

// buildLess orders build tags as pip does: by leading number, then the rest.
func buildLess(a, b string) bool {
	na, ra := splitBuild(a)
	nb, rb := splitBuild(b)
	if na != nb {
		return na < nb
	}
	return ra < rb
}

func splitBuild(s string) (int, string) {
	n, i := 0, 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		n = n*10 + int(s[i]-'0')
		i++
	}
	return n, s[i:]
}

// pythonOK is pip's check_requires_python: an invalid specifier is ignored.
func (c *catalog) pythonOK(spec string) bool {
	if strings.TrimSpace(spec) == "" {
		return true
	}
	s, err := pep440.ParseSpecifierSet(spec)
	if err != nil {
		return true
	}
	return s.Contains(c.python, true)
}

// metadata fetches, parses and checks a candidate's METADATA, once per file.
func (c *catalog) metadata(ctx context.Context, name string, cand candidate) (*metaResult, error) {
	m, mine := c.metaEntry(cand)
	if mine {
		c.loadInto(ctx, m, name, cand)
	}
	select {
	case <-m.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return m, m.err
}

// metadataAhead starts fetching a candidate's METADATA in the background, unless it is
// fetched or being fetched already; metadata then waits for that fetch.
func (c *catalog) metadataAhead(ctx context.Context, name string, cand candidate) {
	if m, mine := c.metaEntry(cand); mine {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			c.loadInto(ctx, m, name, cand)
		}()
	}
}

// metaEntry returns cand's entry; mine is true when it is new, for the caller to load.
func (c *catalog) metaEntry(cand candidate) (m *metaResult, mine bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.metas[cand.file.URL]; ok {
		return m, false
	}
	m = &metaResult{ready: make(chan struct{})}
	c.metas[cand.file.URL] = m
	return m, true
}

func (c *catalog) loadInto(ctx context.Context, m *metaResult, name string, cand candidate) {
	m.meta, m.deps, m.err = c.loadMetadata(ctx, name, cand)
	close(m.ready)
}

// markAhead reports whether name's metadata has not been asked for ahead yet, and marks it.
func (c *catalog) markAhead(name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ahead[name] {
		return false
	}
	c.ahead[name] = true
	return true
}

func (c *catalog) loadMetadata(ctx context.Context, name string, cand candidate) (*wheel.Metadata, []pep508.Requirement, error) {
	raw, err := c.idx.Metadata(ctx, cand.file)
	if err != nil {
		return nil, nil, fmt.Errorf("metadata of %s: %w", cand.file.Filename, err)
	}
	meta, err := wheel.ParseMetadata(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s: %v", ErrBadMetadata, cand.file.Filename, err)
	}
	if pep508.NormalizeName(meta.Name) != name {
		return nil, nil, fmt.Errorf("%w: %s says its name is %q", ErrBadMetadata, cand.file.Filename, meta.Name)
	}
	if v, err := pep440.Parse(meta.Version); err != nil || !v.Equal(cand.version) {
		return nil, nil, fmt.Errorf("%w: %s says its version is %q", ErrBadMetadata, cand.file.Filename, meta.Version)
	}
	var deps []pep508.Requirement
	for _, line := range meta.RequiresDist {
		r, err := pep508.ParseRequirement(line)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %s: Requires-Dist %q: %v", ErrBadMetadata, cand.file.Filename, line, err)
		}
		deps = append(deps, r)
	}
	return meta, deps, nil
}
