package builder

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/internal/memo"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/target"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// The worker's hot-path caches: what a request's classification resolved, what this
// worker found published, and interpreter targets. With them, a request whose layer was
// classified or published here moments ago is bound without resolving against the index
// or asking the repository again.
const (
	// maxCached bounds each cache; past it the oldest half is dropped.
	maxCached = 4096
	// publishedTTL is how long a tag this worker published or found stays known without
	// asking the repository: as long as a classification is shared, so a layer removed
	// from the repository is noticed as soon as a changed index would be.
	publishedTTL = classifyTTL
)

// workerCaches are the Worker's caches.
type workerCaches struct {
	locks     *memo.Cache[*lock.Lock]     // resolved locks by lockCacheKey
	bases     *memo.Cache[*lock.Lock]     // parsed base locks by the sha256 of their bytes
	published *memo.Cache[v1.Descriptor]  // layers in the repository by tag
	targets   *memo.Cache[*target.Target] // interpreter targets by artifact digest (immutable)
	fitted    *memo.Cache[string]         // tags of locks that fit, by interpreter and lockCacheKey
}

func newWorkerCaches() workerCaches {
	return workerCaches{
		locks:     memo.New[*lock.Lock](maxCached, 0),
		bases:     memo.New[*lock.Lock](maxCached, 0),
		published: memo.New[v1.Descriptor](maxCached, publishedTTL),
		targets:   memo.New[*target.Target](maxCached, 0),
		fitted:    memo.New[string](maxCached, 0),
	}
}

// lockCacheKey names the lock resolved on the session base base (an artifact digest) for
// a request whose classification's lock has key (Request.LockKey, a content key), ext or
// isolated.
func lockCacheKey(base, key string, isolated bool) string {
	kind := "ext"
	if isolated {
		kind = "iso"
	}
	return kind + "\x00" + base + "\x00" + key
}

// fittedKey names the verdict that the lock under lockCacheKey ck fits s's interpreter
// (and base, which ck names): the key of workerCaches.fitted.
func fittedKey(s broker.Session, ck string) string { return s.Interpreter + "\x00" + ck }

// sessionBase is s's base lock, parsed once per content.
func (w *Worker) sessionBase(s broker.Session) (*lock.Lock, error) {
	sum := sha256.Sum256(s.BaseLock)
	k := hex.EncodeToString(sum[:])
	if l, ok := w.c.bases.Get(k); ok && len(s.BaseLock) > 0 {
		return l, nil
	}
	l, err := sessionBase(s)
	if err == nil {
		w.c.bases.Put(k, l)
	}
	return l, err
}

var _ broker.Binder = (*Worker)(nil)

// BindNow implements broker.Binder from the worker's caches alone: the lock r's
// classification resolved on s's base, the verdict that it fits s's interpreter and base
// and its tag, and that tag found published, all as a build of r would find them (build
// and publish use the same caches), so r is bound to the same layer a build would bind.
// A request with an upload, or whose lock or layer this worker has not seen, is built.
func (w *Worker) BindNow(s broker.Session, r broker.Request) (broker.Binding, broker.AuditEvent, bool) {
	if r.State != broker.StateApproved || r.LockKey == "" || r.Upload != "" {
		return broker.Binding{}, broker.AuditEvent{}, false
	}
	ck := lockCacheKey(s.Base, r.LockKey, r.BuildIsolated())
	l, ok := w.c.locks.Get(ck)
	if !ok {
		return broker.Binding{}, broker.AuditEvent{}, false
	}
	tag, ok := w.c.fitted.Get(fittedKey(s, ck))
	if !ok {
		return broker.Binding{}, broker.AuditEvent{}, false
	}
	d, ok := w.c.published.Get(tag)
	if !ok {
		return broker.Binding{}, broker.AuditEvent{}, false
	}
	kind := broker.KindExt
	if l.Kind == lock.KindIso {
		kind = broker.KindIso
	}
	ref := w.cfg.Repo.Name() + "@" + d.Digest.String()
	w.binds.Add(1)
	b := broker.Binding{SessionID: s.ID, Kind: kind, Digest: d.Digest.String(), Ref: ref, RequestID: r.ID, Created: time.Now().UTC()}
	return b, event("builder", "bound", r, string(kind)+" layer "+ref+" (published: bound without a build)"), true
}
