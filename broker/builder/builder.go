package builder

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/catalog"
	"github.com/pylayer/pylayer/internal/bg"
	"github.com/pylayer/pylayer/layers/build"
	"github.com/pylayer/pylayer/layers/index"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/oci/sign"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
	"github.com/pylayer/pylayer/publish"
	"github.com/pylayer/pylayer/registry"
)

// Config is what the worker needs. Store, Index, Repo, Signer and Trees are required.
type Config struct {
	Store   broker.Store
	Catalog *catalog.Catalog // nil: catalog.Default() (everything waits for a human)
	Index   *index.Client    // where wheels are resolved and fetched from
	Repo    registry.Repo    // where layers are published
	Signer  sign.Signer      // signs every published layer
	Trees   *build.Builder   // wheelhouse and per-wheel trees
	Notify  func(requestID string)
	Logger  *slog.Logger

	// Holder names this worker in the store's leases; unique per process (default: the
	// host name, the process ID and random bits).
	Holder string
	// Lease is how long a claimed build (and a layer being published) stays this
	// worker's without a renewal; it renews every quarter of it (default
	// broker.DefaultBuildLease). Another replica takes over once it expires.
	Lease time.Duration
	// Reclaim is how often an idle worker looks for work nobody was told about: builds
	// whose holder died, requests approved on another replica (default 2s).
	Reclaim time.Duration
}

// Worker classifies and builds requests. It implements broker.Classifier, broker.Builder
// and broker.Rebaser.
type Worker struct {
	cfg   Config
	wake  chan struct{}
	slots chan struct{} // build slots: resolving against the index, publishing a layer

	mu       sync.Mutex
	ended    chan struct{}          // closed (and replaced) by RequestEnded
	inflight map[string]*flight     // by layer tag: identical builds share one
	classes  map[string]*classified // recent classifications, by base and specs
	c        workerCaches

	builds, binds atomic.Int64
	leaseTries    atomic.Int64 // AcquireLease calls of awaitLease, for tests

	ahead atomic.Pointer[bg.Group] // set while Run runs: the publishes ahead it waits for
}

// goAhead runs fn under Run's context, which Run waits for before it returns; it does
// nothing when Run is not running.
func (w *Worker) goAhead(fn func(ctx context.Context)) bool {
	g := w.ahead.Load()
	return g != nil && g.Go(fn)
}

type flight struct {
	done chan struct{}
	desc v1.Descriptor
	err  error
}

var (
	_ broker.Classifier = (*Worker)(nil)
	_ broker.Builder    = (*Worker)(nil)
	_ broker.Rebaser    = (*Worker)(nil)
	_ broker.Ended      = (*Worker)(nil)
)

// New checks cfg and returns a worker; start it with Run.
func New(cfg Config) (*Worker, error) {
	if cfg.Store == nil || cfg.Index == nil || cfg.Repo == nil || cfg.Signer == nil || cfg.Trees == nil {
		return nil, errors.New("builder: Store, Index, Repo, Signer and Trees are required")
	}
	if cfg.Catalog == nil {
		cfg.Catalog = catalog.Default()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Notify == nil {
		cfg.Notify = func(string) {}
	}
	if cfg.Holder == "" {
		host, _ := os.Hostname()
		cfg.Holder = fmt.Sprintf("%s/%d/%s", host, os.Getpid(), rand.Text()[:8])
	}
	if cfg.Lease <= 0 {
		cfg.Lease = broker.DefaultBuildLease
	}
	if cfg.Reclaim <= 0 {
		cfg.Reclaim = 2 * time.Second
	}
	return &Worker{cfg: cfg, wake: make(chan struct{}, 1), inflight: map[string]*flight{}, c: newWorkerCaches()}, nil
}

// SetNotify sets the function told after every change of a request's state (the
// server's Notify, which wakes long polls).
func (w *Worker) SetNotify(f func(requestID string)) { w.cfg.Notify = f }

// Builds and Binds count published layers and requests bound to an existing layer.
func (w *Worker) Builds() int64 { return w.builds.Load() }
func (w *Worker) Binds() int64  { return w.binds.Load() }

// Enqueue wakes the worker; it never blocks.
func (w *Worker) Enqueue(context.Context, string) {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// claimers is how many requests a worker claims and binds at once: binding a request to
// a layer that exists, or that another claimed request is publishing, takes no build
// slot, so a crowd asking for one layer is bound in a few commits, not one at a time.
const claimers = 16

// Run builds approved requests, jobs at a time, until ctx ends. Each build is claimed
// with a lease (Store.ClaimBuild) that the worker renews while it builds; a build whose
// holder died (this process before a restart, or another replica) is claimed again once
// its lease expires, at start and by every idle worker every Reclaim, so no request stays
// approved, building or built without an owner.
func (w *Worker) Run(ctx context.Context, jobs int) error {
	if jobs < 1 {
		jobs = 1
	}
	w.slots = make(chan struct{}, jobs)
	g := bg.New(ctx, false)
	w.ahead.Store(g)
	defer func() {
		w.ahead.CompareAndSwap(g, nil)
		g.Close(true)
	}()
	var wg sync.WaitGroup
	for i := range max(jobs, claimers) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(ctx, i < jobs)
		}()
	}
	w.Enqueue(ctx, "")
	wg.Wait()
	return ctx.Err()
}

// Holder is the name of this worker in the store's leases.
func (w *Worker) Holder() string { return w.cfg.Holder }

// lease is this worker's lease as of now.
func (w *Worker) lease() broker.Lease {
	return broker.Lease{Holder: w.cfg.Holder, TTL: w.cfg.Lease}
}

// loop claims and processes requests while there are any, then waits to be woken, or,
// if it reclaims, for the next Reclaim tick.
func (w *Worker) loop(ctx context.Context, reclaims bool) {
	var tc <-chan time.Time
	if reclaims {
		tick := time.NewTicker(w.cfg.Reclaim)
		defer tick.Stop()
		tc = tick.C
	}
	for {
		for {
			r, ok, err := w.cfg.Store.ClaimBuild(ctx, w.lease())
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				w.cfg.Logger.Error("claiming a build", "err", err)
				break
			}
			if !ok {
				break
			}
			w.cfg.Notify(r.ID)
			w.process(ctx, r)
			w.Enqueue(ctx, "") // wake the other workers
		}
		select {
		case <-ctx.Done():
			return
		case <-w.wake:
		case <-tc:
		}
	}
}

// errLeaseLost cancels a build whose lease this worker cannot renew.
var errLeaseLost = errors.New("the build's lease was lost: another worker builds it now")

// hold renews the lease on request id every quarter of the lease until stop is called.
// The returned context is cancelled with errLeaseLost when the lease is gone (another
// worker took it) or could not be renewed for a whole lease (the store is unreachable:
// it may have expired), so that this worker stops and writes nothing more.
func (w *Worker) hold(ctx context.Context, renew func(context.Context) error) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(w.cfg.Lease / 4)
		defer tick.Stop()
		renewed := time.Now()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			err := renew(ctx)
			switch {
			case err == nil:
				renewed = time.Now()
			case errors.Is(err, broker.ErrConflict):
				cancel(errLeaseLost)
				return
			case ctx.Err() != nil:
				return
			default:
				w.cfg.Logger.Warn("renewing a build lease", "err", err)
				if time.Since(renewed) >= w.cfg.Lease {
					cancel(errLeaseLost)
					return
				}
			}
		}
	}()
	var once sync.Once
	return ctx, func() { once.Do(func() { close(done); cancel(nil) }) }
}

// process builds (or reuses) and binds one claimed request.
func (w *Worker) process(ctx context.Context, r broker.Request) {
	bctx, stop := w.hold(ctx, func(ctx context.Context) error { return w.cfg.Store.RenewBuild(ctx, r.ID, w.lease()) })
	defer stop()
	desc, l, key, pl, err := w.build(bctx, r)
	if err != nil {
		if bctx.Err() != nil {
			// Shutting down: the request stays building and is claimed again when its
			// lease expires. Or the lease was lost: its new holder finishes it.
			if errors.Is(context.Cause(bctx), errLeaseLost) {
				w.cfg.Logger.Warn("build abandoned", "request", r.ID, "err", errLeaseLost)
			}
			return
		}
		if errors.Is(err, errLeaseLost) { // the layer's lease: claimed again once the request's expires
			w.cfg.Logger.Warn("build abandoned", "request", r.ID, "err", err)
			return
		}
		w.fail(ctx, r, err)
		return
	}
	kind := broker.KindExt
	if l.Kind == lock.KindIso {
		kind = broker.KindIso
	}
	ref := w.cfg.Repo.Name() + "@" + desc.Digest.String()
	// One transaction: built, bound and audited, or (a crash, a failed write) still
	// building, which the next start resumes.
	b := broker.Binding{SessionID: r.SessionID, Kind: kind, Digest: desc.Digest.String(), Ref: ref, RequestID: r.ID, Created: time.Now().UTC()}
	crowd := make(chan struct{})
	go func() { // the requests waiting for the same layer unclaimed, at once and not one by one
		defer close(crowd)
		if pl.LockKey != "" {
			pl.Kind, pl.Digest, pl.Ref = kind, b.Digest, ref
			w.bindApproved(ctx, pl)
		}
	}()
	defer func() { <-crowd }()
	if err := w.cfg.Store.BindBuild(ctx, w.lease(), b, key, event("builder", "bound", r, string(kind)+" layer "+ref)); err != nil {
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, broker.ErrConflict) { // the lease was lost: the new holder binds it
			w.cfg.Logger.Warn("bind abandoned", "request", r.ID, "err", err)
			return
		}
		w.fail(ctx, r, err)
		return
	}
	w.cfg.Notify(r.ID)
}

func (w *Worker) fail(ctx context.Context, r broker.Request, cause error) {
	w.cfg.Logger.Warn("build failed", "request", r.ID, "err", cause)
	err := w.cfg.Store.FinishBuild(ctx, r.ID, w.lease(), func(q *broker.Request) (broker.AuditEvent, error) {
		q.State, q.Error = broker.StateFailed, broker.RedactPaths(cause.Error()) // the agent reads it
		return event("builder", "build-failed", *q, q.Error), nil
	})
	if errors.Is(err, broker.ErrConflict) {
		w.cfg.Logger.Warn("not recording a failed build: the lease was lost to another worker", "request", r.ID)
	} else if err != nil {
		w.cfg.Logger.Error("recording a failed build", "request", r.ID, "err", err)
	}
	w.cfg.Notify(r.ID)
}

// build resolves the request's lock again (the index and base are the same, so is the
// result) and publishes its layer unless the repository has that key already.
// It also returns what else the layer serves as it is (the requests BindNow would bind),
// when r's lock is its classification's.
func (w *Worker) build(ctx context.Context, r broker.Request) (v1.Descriptor, *lock.Lock, string, broker.PublishedLayer, error) {
	var none broker.PublishedLayer
	s, err := w.cfg.Store.GetSession(ctx, r.SessionID)
	if err != nil {
		return v1.Descriptor{}, nil, "", none, err
	}
	base, err := w.sessionBase(s)
	if err != nil {
		return v1.Descriptor{}, nil, "", none, err
	}
	up, err := w.upload(r)
	if err != nil {
		return v1.Descriptor{}, nil, "", none, err
	}
	// The lock its classification resolved (or an earlier build of the same), when this
	// worker has it: no second resolution against the index.
	ck := lockCacheKey(s.Base, r.LockKey, r.BuildIsolated())
	l, ok := w.c.locks.Get(ck)
	if !ok || r.LockKey == "" {
		release, err := w.slot(ctx)
		if err != nil {
			return v1.Descriptor{}, nil, "", none, err
		}
		l, err = w.lockFor(ctx, base, r.Specs, up, r.BuildIsolated())
		release()
		if err != nil {
			return v1.Descriptor{}, nil, "", none, err
		}
		if r.LockKey != "" {
			w.c.locks.Put(ck, l)
		}
	}
	// Whether it fits the session (which may have moved since it was classified) and its
	// tag: the same answer for every request of this lock on this interpreter and base.
	fk := fittedKey(s, ck)
	tag, ok := w.c.fitted.Get(fk)
	if !ok || r.LockKey == "" {
		if err := w.fits(ctx, s, base, l); err != nil {
			return v1.Descriptor{}, nil, "", none, err
		}
		if tag, _, err = l.Tag(); err != nil {
			return v1.Descriptor{}, nil, "", none, err
		}
		if r.LockKey != "" {
			w.c.fitted.Put(fk, tag)
		}
	}
	desc, err := w.publish(ctx, tag, l)
	var pl broker.PublishedLayer
	if r.LockKey != "" && up == nil { // the lock and the verdict BindNow finds for the same requests
		pl = broker.PublishedLayer{Base: s.Base, Interpreter: s.Interpreter, LockKey: r.LockKey, Isolated: r.BuildIsolated()}
	}
	return desc, l, strings.TrimPrefix(tag, string(l.Kind)+"-"), pl, err
}

// crowdBatch is how many waiting requests one BindApproved binds: one transaction each.
const crowdBatch = 64

// bindApproved binds the approved requests that layer p serves as it is, crowdBatch to a
// transaction, until none is left: a crowd that asked for one layer while it was being
// built is bound in a few commits when it lands, not claimed and bound one at a time.
// Any it misses (a claimer had it, or it came later) is claimed as usual.
func (w *Worker) bindApproved(ctx context.Context, p broker.PublishedLayer) {
	detail := string(p.Kind) + " layer " + p.Ref + " (published: bound without a build)"
	for {
		bound, err := w.cfg.Store.BindApproved(ctx, p, crowdBatch, func(r broker.Request) broker.AuditEvent {
			return event("builder", "bound", r, detail)
		})
		if err != nil {
			if ctx.Err() == nil {
				w.cfg.Logger.Warn("binding the requests waiting for a layer (they are claimed one by one instead)", "layer", p.Ref, "err", err)
			}
			return
		}
		w.binds.Add(int64(len(bound)))
		for _, r := range bound {
			w.cfg.Notify(r.ID)
		}
		if len(bound) < crowdBatch {
			return
		}
	}
}

// publish pushes and signs the layer of l under tag, once for any number of identical
// requests at the same time; an existing tag is only reused.
func (w *Worker) publish(ctx context.Context, tag string, l *lock.Lock) (v1.Descriptor, error) {
	if d, ok := w.c.published.Get(tag); ok { // published or found here within publishedTTL
		w.binds.Add(1)
		return d, nil
	}
	w.mu.Lock()
	if f, ok := w.inflight[tag]; ok {
		w.mu.Unlock()
		select {
		case <-f.done:
			return f.desc, f.err
		case <-ctx.Done():
			return v1.Descriptor{}, ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{})}
	w.inflight[tag] = f
	w.mu.Unlock()
	defer func() {
		close(f.done)
		w.mu.Lock()
		delete(w.inflight, tag)
		w.mu.Unlock()
	}()
	release, err := w.slot(ctx)
	if err != nil {
		f.err = err
		return v1.Descriptor{}, err
	}
	res, err := w.publishLeased(ctx, tag, l)
	release()
	f.desc, f.err = res.Desc, err
	if err == nil && res.Desc.Digest != "" {
		w.c.published.Put(tag, res.Desc)
	}
	if res.Pushed {
		w.builds.Add(1)
		w.cfg.Logger.Info("layer pushed", "tag", tag, "digest", res.Desc.Digest.String())
	} else if res.Desc.Digest != "" {
		w.binds.Add(1)
	}
	return f.desc, f.err
}

// slot waits for one of the worker's build slots (jobs of Run) and returns its release.
func (w *Worker) slot(ctx context.Context) (func(), error) {
	if w.slots == nil { // not running: a direct call, as tests make
		return func() {}, nil
	}
	select {
	case w.slots <- struct{}{}:
		return func() { <-w.slots }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// layerLeaseWait is how often a worker checks whether another replica's lease on the
// layer it needs has ended, when nothing tells it sooner: the holder releases it just
// before it binds its request, and that bind, reported by the store's change feed
// (RequestEnded), wakes the waiters at once. A variable for tests.
var layerLeaseWait = 250 * time.Millisecond

// RequestEnded implements broker.Ended: the workers waiting for a layer's lease try again.
func (w *Worker) RequestEnded() {
	w.mu.Lock()
	if w.ended != nil {
		close(w.ended)
		w.ended = nil
	}
	w.mu.Unlock()
}

// endedCh is closed at the next RequestEnded.
func (w *Worker) endedCh() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended == nil {
		w.ended = make(chan struct{})
	}
	return w.ended
}

// awaitLease takes the store's lease named name, waiting while another holder has it
// until it is released (RequestEnded, or the next check every layerLeaseWait) or expires.
func (w *Worker) awaitLease(ctx context.Context, name string) error {
	wait := time.NewTicker(layerLeaseWait)
	defer wait.Stop()
	for {
		ended := w.endedCh() // before the try: an end reported during it is not missed
		w.leaseTries.Add(1)
		ok, err := w.cfg.Store.AcquireLease(ctx, name, w.lease())
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ended:
		case <-wait.C:
		}
	}
}

// publishLeased publishes under the store's lease named after tag, so that replicas
// racing for one layer build it once: the others wait for the lease, then find the tag
// published and only reuse it. The lease is renewed while publishing; if it is lost the
// publish is cancelled.
func (w *Worker) publishLeased(ctx context.Context, tag string, l *lock.Lock) (publish.Result, error) {
	name := "layer:" + tag
	if err := w.awaitLease(ctx, name); err != nil {
		if ctx.Err() != nil {
			return publish.Result{}, err
		}
		return publish.Result{}, fmt.Errorf("taking the lease on layer %s: %w", tag, err)
	}
	pctx, stop := w.hold(ctx, func(ctx context.Context) error {
		ok, err := w.cfg.Store.AcquireLease(ctx, name, w.lease())
		if err == nil && !ok {
			err = fmt.Errorf("the lease on layer %s: %w: another worker took it", tag, broker.ErrConflict)
		}
		return err
	})
	defer func() {
		stop()
		if err := w.cfg.Store.ReleaseLease(context.WithoutCancel(ctx), name, w.cfg.Holder); err != nil {
			w.cfg.Logger.Warn("releasing a layer lease (it expires by itself)", "layer", tag, "err", err)
		}
	}()
	res, err := publish.Publish(pctx, w.cfg.Repo, tag, publish.Layer(w.cfg.Trees, l), w.cfg.Signer)
	if err != nil && pctx.Err() != nil && ctx.Err() == nil {
		err = fmt.Errorf("publishing layer %s: %w", tag, context.Cause(pctx))
	}
	return res, err
}

// upload returns the uploaded wheel of a request as a wheelhouse entry, or nil.
func (w *Worker) upload(r broker.Request) (*broker.Upload, error) {
	if r.Upload == "" {
		return nil, nil
	}
	if len(r.Packages) == 0 {
		return nil, fmt.Errorf("request %s: the uploaded wheel %s was not recorded", r.ID, r.Upload)
	}
	for _, p := range r.Packages {
		if p.Filename == r.Upload {
			return &broker.Upload{Filename: p.Filename, Path: w.uploadPath(p.SHA256, p.Filename), SHA256: p.SHA256, Size: p.Size}, nil
		}
	}
	return nil, fmt.Errorf("request %s: the uploaded wheel %s is not among its packages", r.ID, r.Upload)
}

// event is the audit event of a change the builder makes to r.
func event(actor, action string, r broker.Request, detail string) broker.AuditEvent {
	return broker.AuditEvent{Time: time.Now().UTC(), Actor: actor, Action: action, SessionID: r.SessionID, RequestID: r.ID, Packages: r.Packages, Decision: r.Decision, Detail: detail}
}

func sessionBase(s broker.Session) (*lock.Lock, error) {
	if len(s.BaseLock) == 0 {
		return nil, fmt.Errorf("session %s has no base layer: create it with a base (or rebase it onto the current base) first", s.ID)
	}
	return lock.Parse(s.BaseLock)
}

// uploadPath is where the wheelhouse keeps an uploaded wheel.
func (w *Worker) uploadPath(sha256, filename string) string {
	return filepath.Join(w.cfg.Trees.Root, "wheels", sha256, filename)
}

var _ broker.UploadForgetter = (*Worker)(nil)

// ForgetUpload implements broker.UploadForgetter: the broker deleted its copy of u, so
// the wheelhouse's link to it goes too.
func (w *Worker) ForgetUpload(ctx context.Context, u broker.Upload) error {
	if u.SHA256 == "" || u.Filename == "" || filepath.Base(u.Filename) != u.Filename || filepath.Base(u.SHA256) != u.SHA256 {
		return fmt.Errorf("forgetting upload %q: not a wheel file name and digest", u.Filename)
	}
	p := w.uploadPath(u.SHA256, u.Filename)
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("forgetting upload %s: %w", u.Filename, err)
	}
	os.Remove(filepath.Dir(p)) // the digest's directory, if now empty
	return nil
}

// linkFile makes dst name src's bytes without copying them: a hard link, or where src is
// on another file system a symbolic link. It replaces dst atomically.
func linkFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(dst), ".link-"+rand.Text())
	if err := os.Link(src, tmp); err != nil {
		abs, aerr := filepath.Abs(src)
		if aerr != nil {
			return aerr
		}
		if err := os.Symlink(abs, tmp); err != nil {
			return err
		}
	}
	err := os.Rename(tmp, dst)
	os.Remove(tmp) // a rename onto a link to the same file does nothing and leaves tmp
	return err
}
