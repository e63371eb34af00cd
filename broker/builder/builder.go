package builder

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/catalog"
	"github.com/pylayer/pylayer/layers/build"
	"github.com/pylayer/pylayer/layers/index"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/oci/sign"
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
}

// Worker classifies and builds requests. It implements broker.Classifier, broker.Builder
// and broker.Rebaser.
type Worker struct {
	cfg  Config
	wake chan struct{}

	mu       sync.Mutex
	inflight map[string]*flight     // by layer tag: identical builds share one
	classes  map[string]*classified // recent classifications, by base and specs

	builds, binds atomic.Int64
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
	return &Worker{cfg: cfg, wake: make(chan struct{}, 1), inflight: map[string]*flight{}}, nil
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

// Run builds approved requests, jobs at a time, until ctx ends. Requests left building
// by a worker that died are taken up again first.
func (w *Worker) Run(ctx context.Context, jobs int) error {
	stale, err := w.cfg.Store.ListRequests(ctx, broker.RequestFilter{State: broker.StateBuilding})
	if err != nil {
		return err
	}
	for _, r := range stale {
		err := w.cfg.Store.Transition(ctx, r.ID, func(q *broker.Request) (broker.AuditEvent, error) {
			q.State = broker.StateApproved
			return event("builder", "resume", *q, "the previous worker stopped mid-build; building again"), nil
		})
		if err != nil {
			return err
		}
	}
	if jobs < 1 {
		jobs = 1
	}
	var wg sync.WaitGroup
	for range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.loop(ctx)
		}()
	}
	w.Enqueue(ctx, "")
	wg.Wait()
	return ctx.Err()
}

func (w *Worker) loop(ctx context.Context) {
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	for {
		for {
			r, ok, err := w.cfg.Store.NextBuildable(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				w.cfg.Logger.Error("claiming a request", "err", err)
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
		case <-tick.C:
		}
	}
}

// process builds (or reuses) and binds one claimed request.
func (w *Worker) process(ctx context.Context, r broker.Request) {
	desc, l, err := w.build(ctx, r)
	if err != nil {
		if ctx.Err() != nil {
			return // shutting down: the request stays building and resumes at the next start
		}
		w.fail(ctx, r, err)
		return
	}
	kind := broker.KindExt
	if l.Kind == lock.KindIso {
		kind = broker.KindIso
	}
	key, _ := l.Key()
	ref := w.cfg.Repo.Name() + "@" + desc.Digest.String()
	// One transaction: built, bound and audited, or (a crash, a failed write) still
	// building, which the next start resumes.
	b := broker.Binding{SessionID: r.SessionID, Kind: kind, Digest: desc.Digest.String(), Ref: ref, RequestID: r.ID, Created: time.Now().UTC()}
	if err := w.cfg.Store.Bind(ctx, b, key, event("builder", "bound", r, kind+" layer "+ref)); err != nil {
		if ctx.Err() != nil {
			return
		}
		w.fail(ctx, r, err)
		return
	}
	w.cfg.Notify(r.ID)
}

func (w *Worker) fail(ctx context.Context, r broker.Request, cause error) {
	w.cfg.Logger.Warn("build failed", "request", r.ID, "err", cause)
	err := w.cfg.Store.Transition(ctx, r.ID, func(q *broker.Request) (broker.AuditEvent, error) {
		q.State, q.Error = broker.StateFailed, broker.RedactPaths(cause.Error()) // the agent reads it
		return event("builder", "build-failed", *q, q.Error), nil
	})
	if err != nil {
		w.cfg.Logger.Error("recording a failed build", "request", r.ID, "err", err)
	}
	w.cfg.Notify(r.ID)
}

// build resolves the request's lock again (the index and base are the same, so is the
// result) and publishes its layer unless the repository has that key already.
func (w *Worker) build(ctx context.Context, r broker.Request) (v1.Descriptor, *lock.Lock, error) {
	s, err := w.cfg.Store.GetSession(ctx, r.SessionID)
	if err != nil {
		return v1.Descriptor{}, nil, err
	}
	base, err := sessionBase(s)
	if err != nil {
		return v1.Descriptor{}, nil, err
	}
	up, err := w.upload(r)
	if err != nil {
		return v1.Descriptor{}, nil, err
	}
	l, err := w.lockFor(ctx, base, r.Specs, up, r.BuildIsolated())
	if err != nil {
		return v1.Descriptor{}, nil, err
	}
	tag, _, err := l.Tag()
	if err != nil {
		return v1.Descriptor{}, nil, err
	}
	desc, err := w.publish(ctx, tag, l)
	return desc, l, err
}

// publish pushes and signs the layer of l under tag, once for any number of identical
// requests at the same time; an existing tag is only reused.
func (w *Worker) publish(ctx context.Context, tag string, l *lock.Lock) (v1.Descriptor, error) {
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
	res, err := publish.Publish(ctx, w.cfg.Repo, tag, publish.Layer(w.cfg.Trees, l), w.cfg.Signer)
	f.desc, f.err = res.Desc, err
	if res.Pushed {
		w.builds.Add(1)
	} else if res.Desc.Digest != "" {
		w.binds.Add(1)
	}
	return f.desc, f.err
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
