package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/pylayer/pylayer/internal/bg"
)

// Asynchronous requests. A client that long-polls its request anyway sends
// "Prefer: respond-async" (RFC 7240) with POST /v1/sessions/{id}/requests: unless the
// classifier knows the answer already (Deferred.Known), the request is stored
// classifying and answered 202 at once, without waiting for a resolution against the
// index that the first of a crowd asking for the same thing would otherwise make them
// all wait for. The server then classifies it in the background and records the outcome
// with Store.Classified (bound at once when its layer is published, as a synchronous
// request would be). A failure to find out (the index is down) keeps it classifying,
// with the failure in its error, and is retried with backoff; a request left
// classifying by a replica that died is classified again by any replica's sweep. Two
// replicas classifying one request is harmless: classification is a function of the
// request, its base, the index and the catalog, and only the first outcome is stored.
const (
	// ClassifySweepEvery is how often Serve looks for requests left classifying, at most:
	// a quarter of Options.ClassifyStale when that is shorter (at least a second).
	ClassifySweepEvery = 5 * time.Second
	// DefaultClassifyStale is how long a request stays classifying, untouched, before a
	// sweep takes it as abandoned (its replica died) and classifies it again: a build
	// lease's time (DefaultBuildLease; serve sets it to --build-lease). A replica that
	// retries touches the request at every retry, at most classifyBackoffMax apart.
	DefaultClassifyStale = DefaultBuildLease
	// maxClassifying bounds the background classifications running at once.
	maxClassifying = 64
	// classifyBackoff is the first wait after a failure to classify; it doubles up to
	// classifyBackoffMax, or Options.ClassifyStale/2 when that is shorter.
	classifyBackoff    = time.Second
	classifyBackoffMax = 15 * time.Second
)

// background is the server's work that outlives the requests that start it.
type background struct {
	*bg.Group
	slots chan struct{}
	mine  sync.Map // request ID -> struct{}: being classified here
}

func newBackground() *background {
	return &background{Group: bg.New(context.Background(), false), slots: make(chan struct{}, maxClassifying)}
}

// prefersAsync reports whether the request's Prefer headers ask for respond-async.
func prefersAsync(r *http.Request) bool {
	for _, h := range r.Header.Values("Prefer") {
		for p := range strings.SplitSeq(h, ",") {
			name, _, _ := strings.Cut(p, ";")
			if strings.EqualFold(strings.TrimSpace(name), "respond-async") {
				return true
			}
		}
	}
	return false
}

// deferClassify answers an asynchronous request for specs: stored classifying, 202, and
// classified in the background. It returns false, having answered nothing, when the
// classifier knows the answer already or cannot defer (the caller classifies at once).
func (s *Server) deferClassify(w http.ResponseWriter, r *http.Request, t Token, se Session, specs []string) bool {
	d, ok := s.o.Classifier.(Deferred)
	if !ok || d.Known(se, specs) {
		return false
	}
	now := s.o.Now().UTC()
	req := Request{ID: newID("req_"), SessionID: se.ID, Specs: specs, State: StateClassifying, Created: now, Updated: now}
	created := s.event(t, AuditEvent{Action: "request.create", SessionID: se.ID, RequestID: req.ID,
		Detail: "classifying: the client prefers an asynchronous answer"})
	if err := s.o.Store.CreateRequest(r.Context(), req, created); err != nil {
		s.storeError(w, r, err)
		return true
	}
	s.classifyLater(req.ID, &req, &se)
	w.Header().Set("Location", "/v1/requests/"+req.ID)
	w.Header().Set("Preference-Applied", "respond-async")
	writeJSON(w, http.StatusAccepted, publicRequest(req))
	return true
}

// classifyLater classifies request id in the background, unless this server does so
// already or is closing. req is the request as just created and se its session, or nil
// to read them.
func (s *Server) classifyLater(id string, req *Request, se *Session) {
	b := s.bg
	if _, busy := b.mine.LoadOrStore(id, struct{}{}); busy {
		return
	}
	started := b.Go(func(ctx context.Context) {
		defer b.mine.Delete(id)
		select {
		case b.slots <- struct{}{}:
			defer func() { <-b.slots }()
		case <-ctx.Done():
			return
		}
		s.classifyBackground(ctx, id, req, se)
	})
	if !started { // closing: the next server's sweep takes it up
		b.mine.Delete(id)
	}
}

// classifyBackground classifies request id until its outcome is stored, another replica
// stored one, or ctx ends; a failure to find out waits and tries again.
func (s *Server) classifyBackground(ctx context.Context, id string, req *Request, se *Session) {
	wait := classifyBackoff
	for attempt := 1; ; attempt++ {
		done, err := s.classifyOnce(ctx, id, req, se)
		req = nil // a retry reads it again: it may have moved meanwhile
		if done || ctx.Err() != nil {
			return
		}
		s.log.LogAttrs(ctx, slog.LevelWarn, "classifying a request failed; retrying", slog.String("request", id),
			slog.Int("attempt", attempt), slog.Duration("retry_in", wait), slog.String("error", err.Error()))
		note := fmt.Sprintf("could not classify it yet (attempt %d): %s; retrying in %s", attempt, RedactError(err), wait)
		uerr := s.o.Store.UpdateRequest(ctx, id, func(q *Request) error {
			if q.State != StateClassifying {
				return fmt.Errorf("%w: it is %s now", ErrConflict, q.State)
			}
			q.Error = note
			return nil
		})
		if errors.Is(uerr, ErrConflict) || errors.Is(uerr, ErrNotFound) {
			s.Notify(id)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, classifyBackoffMax, s.o.ClassifyStale/2)
	}
}

// classifyOnce makes one attempt: done is true once the request is no longer
// classifying (its outcome stored here or elsewhere, or it is gone); err says why not.
// created, if set, is the request as its creator just stored it: no need to read it.
func (s *Server) classifyOnce(ctx context.Context, id string, created *Request, se *Session) (done bool, err error) {
	var req Request
	if created != nil {
		req = *created
	} else if req, err = s.o.Store.GetRequest(ctx, id); errors.Is(err, ErrNotFound) {
		return true, nil
	} else if err != nil {
		return false, err
	}
	if req.State != StateClassifying {
		s.Notify(id)
		return true, nil
	}
	var sess Session
	if se != nil && se.ID == req.SessionID {
		sess = *se
	} else if sess, err = s.o.Store.GetSession(ctx, req.SessionID); errors.Is(err, ErrNotFound) {
		return true, nil
	} else if err != nil {
		return false, err
	}
	c, err := s.o.Classifier.Classify(ctx, sess, req.Specs, nil)
	if err != nil {
		return false, err
	}
	if err := checkClassified(c); err != nil {
		return false, err
	}
	c.ID, c.SessionID, c.Specs, c.Created, c.Upload, c.Approver = req.ID, req.SessionID, req.Specs, req.Created, "", ""
	classified := AuditEvent{Time: s.o.Now().UTC(), Actor: "broker", Action: "request.classify", SessionID: req.SessionID,
		RequestID: req.ID, Packages: c.Packages, Decision: c.Decision, Detail: strings.Join(c.Reasons, "; ")}
	var b *Binding
	audit := []AuditEvent{classified}
	if bn, bound, ok := s.bindNow(sess, c); ok {
		c.State, c.Digest = StateBound, bn.Digest
		b, audit = &bn, append(audit, bound)
	}
	err = s.o.Store.Classified(ctx, c, b, audit...)
	if errors.Is(err, ErrConflict) || errors.Is(err, ErrNotFound) { // another replica was first
		s.Notify(id)
		return true, nil
	}
	if err != nil {
		return false, err
	}
	s.Notify(id)
	if c.State == StateApproved && s.o.Builder != nil {
		s.o.Builder.Enqueue(ctx, id)
	}
	return true, nil
}

// sweepClassifying classifies, every ClassifySweepEvery until ctx ends, the requests
// left classifying: at start all of them (this replica may have died with some), then
// those untouched for Options.ClassifyStale (another replica died with them).
func (s *Server) sweepClassifying(ctx context.Context) {
	if _, ok := s.o.Classifier.(Deferred); !ok {
		return
	}
	tick := time.NewTicker(min(ClassifySweepEvery, max(s.o.ClassifyStale/4, time.Second)))
	defer tick.Stop()
	stale := time.Duration(0)
	for {
		if err := s.SweepClassifying(ctx, stale); err != nil && ctx.Err() == nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "looking for requests left classifying", slog.String("error", err.Error()))
		}
		stale = s.o.ClassifyStale
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sweepBatch bounds the requests one sweep takes.
const sweepBatch = 256

// SweepClassifying starts the background classification of the requests classifying
// and untouched for at least stale, oldest first, up to sweepBatch of them.
func (s *Server) SweepClassifying(ctx context.Context, stale time.Duration) error {
	rs, err := s.o.Store.ListRequests(ctx, RequestFilter{State: StateClassifying, Limit: sweepBatch})
	if err != nil {
		return err
	}
	now := s.o.Now()
	for _, r := range rs {
		if now.Sub(r.Updated) >= stale {
			s.classifyLater(r.ID, nil, nil)
		}
	}
	return nil
}
