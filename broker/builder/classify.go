package builder

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/catalog"
	"github.com/pylayer/pylayer/layers/index"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/pep440"
	"github.com/pylayer/pylayer/layers/pep508"
	"github.com/pylayer/pylayer/layers/resolve"
	"github.com/pylayer/pylayer/layers/wheel"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/sign"
)

// classifyTTL is how long a classification of the same specs on the same base is reused:
// long enough that a crowd of agents asking for the same thing resolves it once, short
// enough that a yank or a catalog change shows soon.
const classifyTTL = 30 * time.Second

type classified struct {
	done chan struct{}
	at   time.Time
	req  broker.Request
	err  error
}

// classifyTimeout bounds one shared classification, whoever is waiting for it.
const classifyTimeout = 2 * time.Minute

// Classify resolves specs (or an uploaded wheel and what it requires) against the
// session's base and classifies the result with the catalog. Identical requests on the
// same base, at the same time or within classifyTTL, share one resolution, which runs
// under its own context and classifyTimeout: a caller that leaves stops waiting but does
// not cancel it for the others. Only outcomes are shared for classifyTTL; an error
// (ErrUnavailable: the index failed) is handed to those waiting then and never kept.
func (w *Worker) Classify(ctx context.Context, s broker.Session, specs []string, up *broker.Upload) (broker.Request, error) {
	if up != nil {
		return w.classify(ctx, s, specs, up)
	}
	key := classKey(s, specs)
	w.mu.Lock()
	if w.classes == nil {
		w.classes = map[string]*classified{}
	}
	c, ok := w.classes[key]
	if !(ok && c.at.IsZero() || ok && time.Since(c.at) < classifyTTL && c.err == nil) {
		c = &classified{done: make(chan struct{})}
		w.classes[key] = c
		for k, old := range w.classes { // drop stale entries so the map stays small
			if !old.at.IsZero() && time.Since(old.at) >= classifyTTL {
				delete(w.classes, k)
			}
		}
		go func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), classifyTimeout)
			defer cancel()
			req, err := w.classify(cctx, s, specs, nil)
			w.mu.Lock()
			c.req, c.err, c.at = req, err, time.Now()
			if err != nil && w.classes[key] == c {
				delete(w.classes, key) // the next caller tries again
			}
			w.mu.Unlock()
			close(c.done)
		}()
	}
	w.mu.Unlock()
	select {
	case <-c.done:
		return c.req, c.err
	case <-ctx.Done():
		return broker.Request{}, unavailable(ctx.Err())
	}
}

// classKey names the classification of specs on s's base.
func classKey(s broker.Session, specs []string) string {
	return string(s.BaseLock) + "\x00" + strings.Join(specs, "\x00")
}

var _ broker.Deferred = (*Worker)(nil)

// Known implements broker.Deferred: Classify of specs on s's base would answer from a
// classification done within classifyTTL, without waiting.
func (w *Worker) Known(s broker.Session, specs []string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.classes[classKey(s, specs)]
	return ok && !c.at.IsZero() && c.err == nil && time.Since(c.at) < classifyTTL
}

// unavailable marks err as a failure that may pass (broker.ErrUnavailable): the index or
// registry did not answer, timed out or failed, or the caller went away.
func unavailable(err error) error {
	if err == nil || errors.Is(err, broker.ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", broker.ErrUnavailable, err)
}

// outcome marks an error that is a fact about the request (it does not resolve, its
// wheel is bad), which the catalog turns into a rejection, unlike a failure to find out.
type outcome struct{ error }

func (o outcome) Unwrap() error { return o.error }

// isOutcome reports whether err from lockFor or a fetch is a resolution outcome: no such
// project, no wheel for the target (sdist only), a conflict, a resolution too complex,
// bad metadata or an unsupported requirement, a file whose hash or size does not match
// or that has no hash; or an error lockFor found in the request itself. Anything else
// (timeouts, refused connections, 5xx, a cancelled context) is not.
func isOutcome(err error) bool {
	var o outcome
	if errors.As(err, &o) {
		return true
	}
	for _, s := range []error{resolve.ErrNotFound, resolve.ErrNoWheel, resolve.ErrConflict, resolve.ErrTooComplex,
		resolve.ErrBadMetadata, resolve.ErrUnsupportedR, index.ErrHashMismatch, index.ErrNoHash, index.ErrSizeMismatch, index.ErrNotFound} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

func (w *Worker) classify(ctx context.Context, s broker.Session, specs []string, up *broker.Upload) (broker.Request, error) {
	base, err := w.sessionBase(s)
	if err != nil {
		return broker.Request{}, err
	}
	if up != nil {
		// Put the uploaded wheel in the wheelhouse, where a build finds it by hash: a link
		// to the broker's one copy, which ForgetUpload removes when the broker deletes it.
		if err := linkFile(up.Path, w.uploadPath(up.SHA256, up.Filename)); err != nil {
			return broker.Request{}, fmt.Errorf("keeping the uploaded wheel: %w", err)
		}
	}
	creq := catalog.Request{Requested: specs, Uploaded: up != nil}
	l, rerr := w.lockFor(ctx, base, specs, up, false)
	if rerr == nil {
		if err := w.fits(ctx, s, base, l); errors.Is(err, lock.ErrIncompatible) {
			rerr = outcome{err} // a fact about the request: rejected with both sides named
		} else if err != nil {
			return broker.Request{}, unavailable(err)
		}
	}
	if rerr == nil {
		// Fetch the wheels now, hash checked, into the wheelhouse the build uses: a wheel
		// whose bytes do not match the index's hash is refused before anyone approves it.
		for _, p := range l.Packages {
			if _, err := w.cfg.Trees.Wheel(ctx, p); err != nil {
				if !errors.Is(err, index.ErrHashMismatch) {
					return broker.Request{}, unavailable(fmt.Errorf("fetching %s: %w", p.Filename, err))
				}
				rerr = err
				break
			}
		}
	}
	if rerr != nil && !isOutcome(rerr) {
		return broker.Request{}, unavailable(rerr) // not a decision: nothing is stored or kept
	}
	switch {
	case rerr == nil:
		if creq.Packages, err = w.catalogPackages(ctx, l); err != nil {
			return broker.Request{}, unavailable(err)
		}
	case isBaseConflict(rerr):
		creq.ResolveErr = rerr
		iso, err := w.lockFor(ctx, base, specs, up, true)
		switch {
		case err == nil:
			creq.BaseConflict = true
			if creq.Packages, err = w.catalogPackages(ctx, iso); err != nil {
				return broker.Request{}, unavailable(err)
			}
		case !isOutcome(err):
			return broker.Request{}, unavailable(err)
		}
	default:
		creq.ResolveErr = rerr
	}
	cl := w.cfg.Catalog.Classify(creq)
	req := broker.Request{Decision: string(cl.Decision), Reasons: cl.Reasons, Isolated: cl.Isolated}
	for _, p := range creq.Packages {
		req.Packages = append(req.Packages, broker.Pkg{Name: p.Name, Version: p.Version, Filename: p.Filename, SHA256: p.SHA256, Size: p.Size})
	}
	switch cl.Decision {
	case catalog.AutoApproved:
		req.State = broker.StateApproved
	case catalog.Pending:
		req.State = broker.StatePending
	default:
		req.State = broker.StateRejected
	}
	if l != nil {
		req.LockKey, _ = l.Key()
		if rerr == nil && req.LockKey != "" {
			w.c.locks.Put(lockCacheKey(s.Base, req.LockKey, false), l) // the build of this request starts from it
			if req.State == broker.StateApproved && up == nil {
				w.publishAhead(s, l, req.LockKey)
			}
		}
	}
	return req, nil
}

// publishAhead starts publishing the layer of an auto-approved classification's lock l
// (checked to fit s) in the background at once, while the request is stored and claimed:
// the build that claims it joins this publish (publish shares one per tag, the layer's
// lease one across replicas) or finds it done, and requests asked meanwhile are bound
// without a build (BindNow). It keeps the verdict that l fits, as a build keeps it. Only
// while Run runs, which waits for it.
func (w *Worker) publishAhead(s broker.Session, l *lock.Lock, key string) {
	tag, _, err := l.Tag()
	if err != nil {
		return
	}
	w.c.fitted.Put(fittedKey(s, lockCacheKey(s.Base, key, false)), tag)
	if _, ok := w.c.published.Get(tag); ok {
		return
	}
	w.goAhead(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, classifyTimeout)
		defer cancel()
		if _, err := w.publish(ctx, tag, l); err != nil && ctx.Err() == nil {
			w.cfg.Logger.Warn("publishing an approved layer ahead of its build (the build tries again)", "tag", tag, "err", err)
		}
	})
}

func isBaseConflict(err error) bool {
	var ce *resolve.ConflictError
	return errors.As(err, &ce) && len(ce.BasePins()) > 0
}

// catalogPackages are l's packages as the catalog classifies them. When the catalog
// refuses wheels that need shared libraries a session lacks, each wheel's tree is
// installed now (the build reuses it) and checked for the lock's target platform.
func (w *Worker) catalogPackages(ctx context.Context, l *lock.Lock) ([]catalog.Package, error) {
	var out []catalog.Package
	for _, p := range l.Packages {
		cp := catalog.Package{Name: p.Name, Version: p.Version, Filename: p.Filename, SHA256: p.SHA256, Size: p.Size}
		if w.cfg.Catalog.RefusesNative() {
			t, err := w.cfg.Trees.Tree(ctx, p, l.Target.Python)
			if err != nil {
				return nil, err
			}
			if cp.Native, err = w.cfg.Trees.NativeReport(ctx, t, l.Target.Platform); err != nil {
				return nil, err
			}
		}
		out = append(out, cp)
	}
	return out, nil
}

// lockFor resolves what a request adds: an ext lock (the delta over base, whose pins it
// must live with) or, isolated, an iso lock (the base's requirements and the request's,
// resolved together without the base's pins). An uploaded wheel is pinned as it is and
// its own requirements are resolved.
func (w *Worker) lockFor(ctx context.Context, base *lock.Lock, specs []string, up *broker.Upload, isolated bool) (*lock.Lock, error) {
	l, err := w.resolveLock(ctx, base, specs, up, isolated)
	var re resolveErr
	if err != nil && !errors.As(err, &re) {
		err = outcome{err} // found in the request, its upload or the base: no index involved
	}
	if errors.As(err, &re) {
		err = re.error
	}
	return l, err
}

// resolveErr is an error of resolve.NewLock, which may be an outcome or a failure.
type resolveErr struct{ error }

func (r resolveErr) Unwrap() error { return r.error }

func (w *Worker) resolveLock(ctx context.Context, base *lock.Lock, specs []string, up *broker.Upload, isolated bool) (*lock.Lock, error) {
	var reqs []pep508.Requirement
	for _, s := range specs {
		r, err := pep508.ParseRequirement(s)
		if err != nil {
			return nil, fmt.Errorf("requirement %q: %w", s, err)
		}
		reqs = append(reqs, r)
	}
	var upPkg *lock.Package
	if up != nil {
		meta, _, err := wheel.ReadMetadata(w.uploadPath(up.SHA256, up.Filename))
		if err != nil { // the agent reads this: the wheel's name, not the wheelhouse path
			return nil, fmt.Errorf("uploaded wheel %s: %w", up.Filename, broker.RedactError(err))
		}
		fn, err := wheel.ParseFilename(up.Filename)
		if err != nil {
			return nil, err
		}
		v, err := pep440.Parse(fn.Version)
		if err != nil {
			return nil, err
		}
		upPkg = &lock.Package{Name: fn.Project(), Version: v.String(), Filename: up.Filename, URL: "upload:" + up.SHA256, SHA256: up.SHA256, Size: up.Size, RequiredBy: []string{lock.Requested}}
		env := pep508.Environment(base.Target.Markers)
		for _, d := range meta.RequiresDist {
			r, err := pep508.ParseRequirement(d)
			if err != nil {
				return nil, fmt.Errorf("uploaded wheel requires %q: %w", d, err)
			}
			if r.Marker == nil || r.Marker.Evaluate(env, "") {
				reqs = append(reqs, r)
			}
		}
	}
	spec := resolve.LockSpec{Kind: lock.KindExt, Target: base.Target, Base: base, Record: append([]string{}, specs...)}
	if isolated {
		spec.Kind, spec.Base = lock.KindIso, nil
		for _, s := range base.Requirements {
			r, err := pep508.ParseRequirement(s)
			if err != nil {
				return nil, err
			}
			reqs = append(reqs, r)
			spec.Record = append(spec.Record, s)
		}
	}
	if upPkg != nil {
		spec.Pinned = []lock.Package{*upPkg}
		spec.Record = append(spec.Record, upPkg.Name+"=="+upPkg.Version)
	}
	spec.Requirements = reqs
	l, err := resolve.NewLock(ctx, w.cfg.Index, w.cfg.Trees, spec)
	if err != nil {
		return nil, resolveErr{err}
	}
	if len(l.Packages) == 0 {
		return nil, errors.New("nothing to add: the base layer already provides everything requested")
	}
	// The lock as this worker builds it: its key covers the interpreter compiling the .pyc.
	if l, err = w.cfg.Trees.Stamp(ctx, l); err != nil {
		return nil, resolveErr{err} // the interpreter failed: not a fact about the request
	}
	return l, nil
}

// CurrentTag and PythonCurrentTag are the moving tags that name what new sessions and
// rebases get: publish the base with --tag current, the interpreter with --tag python-current.
const (
	CurrentTag       = "current"
	PythonCurrentTag = "python-current"
)

// Current returns the repository's current interpreter (if tagged) and base, with the
// base's lock, after checking that this worker's key signed them.
func (w *Worker) Current(ctx context.Context) (interp, base string, baseLock []byte, err error) {
	v, err := sign.NewVerifier("the broker's signing key", w.cfg.Signer)
	if err != nil {
		return "", "", nil, err
	}
	repo := w.cfg.Repo
	d, err := repo.Resolve(ctx, CurrentTag)
	if err != nil {
		return "", "", nil, fmt.Errorf("the current base (tag %q in %s): %w", CurrentTag, repo.Name(), err)
	}
	if _, err := sign.Verify(ctx, repo, d, v); err != nil {
		return "", "", nil, err
	}
	raw, err := repo.Manifest(ctx, d)
	if err != nil {
		return "", "", nil, err
	}
	m, err := oci.ParseManifest(raw)
	if err != nil {
		return "", "", nil, err
	}
	if m.Config.MediaType != oci.MediaTypeLock || m.Config.Size > lock.MaxBytes {
		return "", "", nil, fmt.Errorf("%s:%s is not a layer", repo.Name(), CurrentTag)
	}
	rc, err := repo.Blob(ctx, m.Config)
	if err != nil {
		return "", "", nil, err
	}
	defer rc.Close()
	if baseLock, err = io.ReadAll(rc); err != nil {
		return "", "", nil, err
	}
	bl, err := lock.Parse(baseLock)
	if err != nil || bl.Kind != lock.KindBase {
		return "", "", nil, fmt.Errorf("%s:%s is not a base layer", repo.Name(), CurrentTag)
	}
	if pd, err := repo.Resolve(ctx, PythonCurrentTag); err == nil {
		if _, err := sign.Verify(ctx, repo, pd, v); err != nil {
			return "", "", nil, err
		}
		interp = pd.Digest.String()
		py, err := w.interpreterTarget(ctx, interp)
		if err != nil {
			return "", "", nil, err
		}
		if err := lock.CheckStack(py, repo.Name()+":"+PythonCurrentTag, []lock.Named{{Name: repo.Name() + ":" + CurrentTag, Lock: bl}}); err != nil {
			return "", "", nil, fmt.Errorf("the current base and interpreter: %w", err)
		}
	}
	return interp, d.Digest.String(), baseLock, nil
}

// Rebase moves a session onto the current base (and interpreter), then asks again for
// every ext request it had bound: each is classified against the new base like a new
// request, so it is bound again when it still fits and comes back rejected or pending,
// with the pin that blocks it, when it does not. Isolated layers stay bound. Everything
// is classified first and then applied in one transaction (Store.ApplyRebase): a failure
// on the way, or a crash, leaves the session as it was.
func (w *Worker) Rebase(ctx context.Context, sessionID, actor string) (broker.Session, error) {
	s, err := w.cfg.Store.GetSession(ctx, sessionID)
	if err != nil {
		return s, err
	}
	interp, base, baseLock, err := w.Current(ctx)
	if err != nil {
		return s, unavailable(err)
	}
	if interp == "" {
		interp = s.Interpreter
	}
	old, err := w.cfg.Store.Bindings(ctx, sessionID)
	if err != nil {
		return s, err
	}
	p := broker.RebasePlan{SessionID: sessionID, FromBase: s.Base, Interpreter: interp, Base: base, BaseLock: baseLock}
	for _, b := range old {
		if b.Kind == broker.KindIso {
			p.Bindings = append(p.Bindings, b)
		}
	}
	next := s
	next.Interpreter, next.Base, next.BaseLock = interp, base, baseLock
	for _, b := range old {
		if b.Kind != broker.KindExt || b.RequestID == "" {
			continue
		}
		prev, err := w.cfg.Store.GetRequest(ctx, b.RequestID)
		if err != nil {
			return s, err
		}
		var up *broker.Upload
		if prev.Upload != "" {
			if up, err = w.upload(prev); err != nil {
				return s, err
			}
		}
		req, err := w.Classify(ctx, next, prev.Specs, up)
		if err != nil {
			return s, err
		}
		now := time.Now().UTC()
		req.ID, req.SessionID, req.Specs, req.Upload, req.Created, req.Updated = newRequestID(), sessionID, prev.Specs, prev.Upload, now, now
		p.Requests = append(p.Requests, req)
		p.Audit = append(p.Audit, event("builder", "rebase.request", req, fmt.Sprintf("asked again after rebase (was %s): %s", prev.ID, req.State)))
	}
	p.Audit = append(p.Audit, broker.AuditEvent{Time: time.Now().UTC(), Actor: actor, Action: "session.rebase", SessionID: sessionID,
		Detail: fmt.Sprintf("base %s -> %s", s.Base, base)})
	if err := w.cfg.Store.ApplyRebase(ctx, p); err != nil {
		return s, err
	}
	for _, req := range p.Requests {
		if req.State == broker.StateApproved {
			w.Enqueue(ctx, req.ID)
		}
	}
	return w.cfg.Store.GetSession(ctx, sessionID)
}

func newRequestID() string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return "req_" + hex.EncodeToString(b)
}
