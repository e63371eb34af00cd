package resolve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"

	"github.com/pylayer/pylayer/internal/logctx"
	"github.com/pylayer/pylayer/layers/index"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/pep440"
	"github.com/pylayer/pylayer/layers/pep508"
	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/layers/wheel"
)

// Pin is a package the base layer already holds: an ext layer must live with its version.
type Pin struct {
	Name    string // normalized
	Version pep440.Version
	File    index.File
}

// Options says what to resolve for.
type Options struct {
	Target      target.Target
	Constraints []pep508.Requirement // narrow the versions of projects that are required; never add one
	Base        []Pin                // installed by the base layer; never in the result
	Pre         bool                 // allow pre-releases everywhere, as pip --pre
	MaxSteps    int                  // candidate attempts before giving up; 0 means 20000
}

// Resolved is one pinned wheel.
type Resolved struct {
	Name       string // normalized
	Version    pep440.Version
	File       index.File
	Metadata   *wheel.Metadata
	RequiredBy []string // normalized names of the packages that need it, lock.Requested for the user
}

// edge is one requirement on a project, and who made it.
type edge struct {
	req    pep508.Requirement
	parent string // normalized name of the requiring package, "" for the user
	cause  cause
}

// choice is the pinned version of a project in a partial solution.
type choice struct {
	cand   candidate
	deps   []pep508.Requirement
	extras map[string]bool
	base   bool
}

// state is a partial solution; clone before changing it.
type state struct {
	chosen map[string]*choice
	reqs   map[string][]edge
	queue  []edge
}

func (s *state) clone() *state {
	n := &state{chosen: make(map[string]*choice, len(s.chosen)+1), reqs: make(map[string][]edge, len(s.reqs)+1)}
	for k, v := range s.chosen {
		n.chosen[k] = v
	}
	for k, v := range s.reqs {
		n.reqs[k] = v[:len(v):len(v)]
	}
	n.queue = append([]edge(nil), s.queue...)
	return n
}

type resolver struct {
	cat         *catalog
	opts        Options
	env         pep508.Environment
	constraints map[string][]pep508.Requirement
	steps       int
	log         *slog.Logger
}

// fatal marks an error that no other choice upstream can fix (it comes from the user's own
// requirements, constraints or the base), so the search stops instead of backtracking.
type fatal struct{ error }

func (f fatal) Unwrap() error { return f.error }

// Resolve pins reqs and everything they need to one wheel per project.
func Resolve(ctx context.Context, idx Index, reqs []pep508.Requirement, opts Options) ([]Resolved, error) {
	cat, err := newCatalog(idx, opts.Target)
	if err != nil {
		return nil, err
	}
	// Nothing started in the background outlives the resolution: what it still fetches
	// when the answer is known is cancelled and waited for.
	ctx, cancel := context.WithCancel(ctx)
	defer cat.wg.Wait()
	defer cancel()
	if opts.MaxSteps == 0 {
		opts.MaxSteps = 20000
	}
	r := &resolver{cat: cat, opts: opts, env: pep508.Environment(opts.Target.Markers), constraints: map[string][]pep508.Requirement{}, log: logctx.From(ctx)}
	for _, c := range opts.Constraints {
		if len(c.Extras) > 0 {
			return nil, fmt.Errorf("%w: constraint %s: constraints cannot have extras", ErrUnsupportedR, c)
		}
		if c.URL != "" {
			return nil, fmt.Errorf("%w: constraint %s: URL constraints are not supported", ErrUnsupportedR, c)
		}
		if c.Marker != nil && !c.Marker.Evaluate(r.env, "") {
			continue
		}
		r.constraints[c.Key()] = append(r.constraints[c.Key()], c)
	}
	st := &state{chosen: map[string]*choice{}, reqs: map[string][]edge{}}
	for _, p := range opts.Base {
		st.chosen[p.Name] = &choice{cand: candidate{version: p.Version, file: p.File}, base: true, extras: map[string]bool{}}
	}
	for _, q := range reqs {
		if q.URL != "" {
			return nil, fmt.Errorf("%w: %s: direct URL requirements are not supported; publish the wheel to an index", ErrUnsupportedR, q)
		}
		if q.Marker != nil && !q.Marker.Evaluate(r.env, "") {
			r.log.Debug("ignoring requirement, markers do not match the target", "requirement", q.String())
			continue
		}
		st.queue = append(st.queue, edge{req: q, cause: cause{by: "you requested", spec: q.String()}})
		r.ahead(ctx, st, q)
	}
	final, err := r.solve(ctx, st)
	if err != nil {
		var f fatal
		if errors.As(err, &f) {
			return nil, f.error
		}
		return nil, err
	}
	return r.result(final), nil
}

func (r *resolver) result(st *state) []Resolved {
	var out []Resolved
	for name, ch := range st.chosen {
		if ch.base {
			continue
		}
		var by []string
		for _, e := range st.reqs[name] {
			if e.parent == "" {
				by = append(by, lock.Requested)
			} else if e.parent != name {
				by = append(by, e.parent)
			}
		}
		sort.Strings(by)
		r.cat.mu.Lock()
		m := r.cat.metas[ch.cand.file.URL]
		r.cat.mu.Unlock()
		f := ch.cand.file
		if sz, ok := r.cat.idx.(sizer); ok && f.Size <= 0 {
			f.Size = sz.SizeOf(f) // a plain index's: what reading its metadata found
		}
		out = append(out, Resolved{Name: name, Version: ch.cand.version, File: f, Metadata: m.meta, RequiredBy: uniq(by)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func uniq(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// solve extends st until every requirement is met, backtracking over versions on conflicts.
func (r *resolver) solve(ctx context.Context, st *state) (*state, error) {
	for len(st.queue) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, fatal{err}
		}
		e := st.queue[0]
		st.queue = st.queue[1:]
		name := e.req.Key()
		st.reqs[name] = append(st.reqs[name], e)
		ch, ok := st.chosen[name]
		if ok && !ch.base && !e.req.Specifier.Contains(ch.cand.version, true) {
			// Like resolvelib, re-pin a project whose pin a new requirement rules out, choosing
			// again with everything now known about it (which may admit a pre-release).
			delete(st.chosen, name)
			ok = false
		}
		if !ok {
			// Gather every pending requirement on this name: pip merges all it knows before pinning.
			rest := st.queue[:0:0]
			for _, q := range st.queue {
				if q.req.Key() == name {
					st.reqs[name] = append(st.reqs[name], q)
				} else {
					rest = append(rest, q)
				}
			}
			st.queue = rest
			return r.choose(ctx, st, name)
		}
		if !e.req.Specifier.Contains(ch.cand.version, true) {
			return nil, r.conflict(st, name, ch)
		}
		var added []string
		for _, x := range e.req.Extras {
			if !ch.extras[x] {
				added = append(added, x)
			}
		}
		if len(added) > 0 {
			nc := *ch
			nc.extras = copySet(ch.extras, added...)
			if nc.deps == nil && ch.base {
				m, err := r.cat.metadata(ctx, name, ch.cand)
				if err != nil {
					return nil, fatal{err}
				}
				nc.deps = m.deps
			}
			st.chosen[name] = &nc
			r.enqueue(ctx, st, name, &nc, added)
		}
	}
	return st, nil
}

// choose pins name to each allowed version in turn, highest first.
func (r *resolver) choose(ctx context.Context, st *state, name string) (*state, error) {
	p, err := r.cat.project(ctx, name)
	if err != nil {
		return nil, r.fixed(st, name, err)
	}
	spec := pep440.SpecifierSet{}
	for _, e := range st.reqs[name] {
		spec = spec.And(e.req.Specifier)
	}
	for _, c := range r.constraints[name] {
		spec = spec.And(c.Specifier)
	}
	cands := r.allowed(p, spec)
	if len(cands) == 0 {
		return nil, r.fixed(st, name, r.noCandidate(st, p, spec))
	}
	extras := map[string]bool{}
	for _, e := range st.reqs[name] {
		for _, x := range e.req.Extras {
			extras[x] = true
		}
	}
	var first error
	for _, cand := range cands {
		r.steps++
		if r.steps > r.opts.MaxSteps {
			return nil, fatal{fmt.Errorf("%w: gave up after %d attempts; pin some versions", ErrTooComplex, r.opts.MaxSteps)}
		}
		m, err := r.cat.metadata(ctx, name, cand)
		if err == nil && m.meta.RequiresPython != "" && !r.cat.pythonOK(m.meta.RequiresPython) {
			err = &ConflictError{Project: name, Causes: []cause{{by: fmt.Sprintf("%s %s requires", name, cand.version), spec: "Python " + m.meta.RequiresPython}}, Detail: "target is Python " + r.cat.python.String()}
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, fatal{ctx.Err()}
			}
			var ce *ConflictError
			if !errors.Is(err, ErrBadMetadata) && !errors.As(err, &ce) {
				// Not a fact about this version, which pip would discard and go on (its
				// metadata names another project or version, or is malformed; it requires
				// another Python), but the index failing to answer, or answering with what
				// it did not list (a hash or size mismatch, a file that is no wheel): as in
				// pip, an error. Going on to an older version would make the answer depend
				// on the failure: a lock, or a broker's classification, that holds the
				// version before the newest because the index hiccuped.
				return nil, fatal{err}
			}
			if first == nil {
				first = err
			}
			continue
		}
		next := st.clone()
		ch := &choice{cand: cand, deps: m.deps, extras: copySet(extras)}
		next.chosen[name] = ch
		x := []string{""}
		for e := range ch.extras {
			x = append(x, e)
		}
		sort.Strings(x)
		r.enqueue(ctx, next, name, ch, x)
		r.log.Debug("trying", "project", name, "version", cand.version.String())
		out, err := r.solve(ctx, next)
		if err == nil {
			return out, nil
		}
		var f fatal
		if errors.As(err, &f) {
			return nil, err
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// enqueue adds ch's dependencies that apply under any of extras ("" is the plain install).
func (r *resolver) enqueue(ctx context.Context, st *state, name string, ch *choice, extras []string) {
	for _, d := range ch.deps {
		applies := d.Marker == nil
		for _, x := range extras {
			if applies {
				break
			}
			applies = d.Marker.Evaluate(r.env, x)
		}
		if !applies {
			continue
		}
		if d.Marker == nil && len(extras) > 0 && extras[0] != "" {
			continue // already added with the plain install
		}
		st.queue = append(st.queue, edge{req: d, parent: name, cause: cause{by: fmt.Sprintf("%s %s requires", name, ch.cand.version), spec: d.String()}})
		r.ahead(ctx, st, d)
	}
}

// ahead starts loading req's project's page (catalog.prefetch) and fetches in the
// background, once per project, the METADATA of the version choose will most likely try
// first for it: the highest that req and the constraints allow. choose then finds it
// fetched or in flight (catalog.metadata waits for it), so the metadata of a resolution's
// projects arrive side by side instead of one after the other (bench/lock.sh, 21
// packages: from 62 to 51-57 ms on a plain PEP 503 index, where each is read with range
// requests of the wheel, and from 30-40 to 26 ms with metadata files). A guess that other
// requirements later rule out costs one fetch and changes nothing: what is fetched is
// keyed by file, and metadata is the file's content.
func (r *resolver) ahead(ctx context.Context, st *state, req pep508.Requirement) {
	name := req.Key()
	r.cat.prefetch(ctx, name)
	if ch, ok := st.chosen[name]; ok && ch.base {
		return
	}
	if !r.cat.markAhead(name) {
		return
	}
	spec := req.Specifier
	for _, c := range r.constraints[name] {
		spec = spec.And(c.Specifier)
	}
	r.cat.wg.Add(1)
	go func() {
		defer r.cat.wg.Done()
		p, err := r.cat.project(ctx, name)
		if err != nil {
			return // choose reports it
		}
		if cands := r.allowed(p, spec); len(cands) > 0 {
			r.cat.metadataAhead(ctx, name, cands[0])
		}
	}()
}

// allowed applies pip's rules: specifier filter with pre-release fallback, then yanked files
// only when every remaining one is yanked and the specifier pins a version.
func (r *resolver) allowed(p *project, spec pep440.SpecifierSet) []candidate {
	vs := make([]pep440.Version, len(p.cands))
	for i, c := range p.cands {
		vs[i] = c.version
	}
	var pre *bool
	if r.opts.Pre {
		t := true
		pre = &t
	}
	ok := map[string]bool{}
	for _, v := range spec.Filter(vs, pre) {
		ok[v.String()] = true
	}
	var out []candidate
	allYanked := true
	for _, c := range p.cands {
		if ok[c.version.String()] {
			out = append(out, c)
			allYanked = allYanked && c.file.Yanked
		}
	}
	if allYanked && spec.IsPinned() {
		return out
	}
	kept := out[:0]
	for _, c := range out {
		if !c.file.Yanked {
			kept = append(kept, c)
		}
	}
	return kept
}

func (r *resolver) causes(st *state, name string) []cause {
	var cs []cause
	for _, e := range st.reqs[name] {
		cs = append(cs, e.cause)
	}
	for _, c := range r.constraints[name] {
		cs = append(cs, cause{by: "a constraint says", spec: c.String()})
	}
	if ch, ok := st.chosen[name]; ok && ch.base {
		cs = append(cs, cause{spec: name + "==" + ch.cand.version.String(), base: true})
	}
	return cs
}

func (r *resolver) conflict(st *state, name string, ch *choice) error {
	err := &ConflictError{Project: name, Causes: r.causes(st, name)}
	if !ch.base {
		// the pinned version came from a requirement seen earlier; say which
		err.Detail = "pinned to " + ch.cand.version.String() + " earlier"
	}
	return r.fixed(st, name, err)
}

// fixed makes err fatal when every requirement on name comes from the user, a constraint
// or the base: then no other version of any package upstream can help.
func (r *resolver) fixed(st *state, name string, err error) error {
	for _, e := range st.reqs[name] {
		if e.parent != "" {
			return err
		}
	}
	return fatal{err}
}

func (r *resolver) noCandidate(st *state, p *project, spec pep440.SpecifierSet) error {
	if len(p.cands) == 0 {
		switch {
		case len(p.sdists) > 0 && len(p.unfit) == 0:
			return &NoWheelError{Project: p.name, Reason: fmt.Sprintf("only source distributions are published (%s); pylayer installs wheels only, never builds sdists", strings.Join(first(p.sdists, 3), ", "))}
		case len(p.unfit) > 0:
			return &NoWheelError{Project: p.name, Reason: fmt.Sprintf("no wheel fits target %s (found %s)", r.cat.target.String(), strings.Join(first(p.unfit, 4), ", "))}
		default:
			return &NoWheelError{Project: p.name, Reason: "the index lists no files"}
		}
	}
	var have []string
	for _, c := range p.cands {
		s := c.version.String()
		if c.file.Yanked {
			s += " (yanked)"
		}
		have = append(have, s)
	}
	return &ConflictError{Project: p.name, Causes: r.causes(st, p.name), Detail: "available: " + strings.Join(first(have, 8), ", ")}
}

func first(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
}

func copySet(m map[string]bool, add ...string) map[string]bool {
	n := make(map[string]bool, len(m)+len(add))
	for k := range m {
		n[k] = true
	}
	for _, k := range add {
		n[k] = true
	}
	return n
}
