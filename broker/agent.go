package broker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/pep508"
)

// Limits of a package request.
const (
	MaxSpecs   = 64
	MaxSpecLen = 1024
)

// newID returns prefix + 128 random bits in hex.
func newID(prefix string) string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("broker: crypto/rand failed: " + err.Error())
	}
	return prefix + hex.EncodeToString(b[:])
}

// EnvPackage is one package of the session's base.
type EnvPackage struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Env is what GET /v1/sessions/{id}/env answers.
type Env struct {
	Session  Session      `json:"session"`
	Base     []EnvPackage `json:"base_packages"`
	Bindings []Binding    `json:"bindings"`
	Requests []Request    `json:"open_requests"`
	// Degraded says that the session has no interpreter artifact: its sandbox runs the
	// host's /usr/bin/python3, whatever version that is, and a note says so.
	Degraded bool   `json:"degraded"`
	Note     string `json:"note,omitempty"`
}

func (s *Server) env(w http.ResponseWriter, r *http.Request, t Token) {
	se, ok := s.session(w, r, t, r.PathValue("id"))
	if !ok {
		return
	}
	env := Env{Session: se, Base: []EnvPackage{}, Bindings: []Binding{}, Requests: []Request{}}
	if se.Interpreter == "" {
		env.Degraded = true
		env.Note = "degraded mode: no interpreter artifact is bound; sessions use the host's /usr/bin/python3"
	}
	if len(se.BaseLock) > 0 {
		base, err := s.basePackages(se.BaseLock)
		if err != nil {
			s.internal(w, r, fmt.Errorf("session %s: stored base lock: %w", se.ID, err))
			return
		}
		env.Base = base
	}
	st, err := s.sessionState(r.Context(), se)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	env.Bindings = append(env.Bindings, st.bindings...)
	env.Requests = append(env.Requests, st.open...)
	writeJSON(w, http.StatusOK, env)
}

// maxSessionStates bounds the sessions whose env the server keeps.
const maxSessionStates = 1 << 16

// sessionState is what env shows of a session besides its row, as of a session version.
type sessionState struct {
	version  int64
	bindings []Binding
	open     []Request // its open requests, as agents see them
}

// sessionState returns se's bindings and open requests from memory when the version read
// with se is the one they were read at, else from the store. The store moves the version
// in the same transaction as any change env shows, so a session read at version v has
// seen no change since the state kept for v; a state read after v and kept under it is
// only ever newer, and the next read of a newer version reads again. Agents poll env;
// with this a poll is one read of the session row.
//
// Version 0 of a VersionedSessions store is a session with nothing bound or asked: no
// read at all. Of another store it means nothing (it may keep no versions): read.
func (s *Server) sessionState(ctx context.Context, se Session) (sessionState, error) {
	if se.Version == 0 {
		if _, ok := s.o.Store.(VersionedSessions); ok {
			return sessionState{}, nil
		}
	} else if st, ok := s.states.Get(se.ID); ok && st.version == se.Version {
		return st, nil
	}
	bs, err := s.o.Store.Bindings(ctx, se.ID)
	if err != nil {
		return sessionState{}, err
	}
	reqs, err := s.o.Store.ListRequests(ctx, RequestFilter{SessionID: se.ID})
	if err != nil {
		return sessionState{}, err
	}
	st := sessionState{version: se.Version, bindings: bs}
	for _, q := range reqs {
		if !Terminal(q.State) {
			st.open = append(st.open, publicRequest(q))
		}
	}
	s.states.Put(se.ID, st)
	return st, nil
}

// maxBases bounds the base locks whose packages the server keeps parsed: a fleet has a
// handful of current bases, not thousands.
const maxBases = 256

// basePackages lists the packages of a stored base lock, parsed once per content: env is
// the call agents poll, and the lock is the same bytes for every session on that base.
func (s *Server) basePackages(raw []byte) ([]EnvPackage, error) {
	sum := sha256.Sum256(raw)
	k := string(sum[:])
	if ps, ok := s.bases.Get(k); ok {
		return slices.Clone(ps), nil
	}
	l, err := lock.Parse(raw)
	if err != nil {
		return nil, err
	}
	ps := make([]EnvPackage, 0, len(l.Packages))
	for _, p := range l.Packages {
		ps = append(ps, EnvPackage{Name: p.Name, Version: p.Version})
	}
	s.bases.Put(k, ps)
	return slices.Clone(ps), nil
}

// packagesBody is the JSON body of POST /v1/sessions/{id}/requests.
type packagesBody struct {
	Packages []string `json:"packages"`
}

// checkSpecs validates requirement strings the way pip would parse them.
func checkSpecs(specs []string) ([]string, error) {
	if len(specs) == 0 {
		return nil, fmt.Errorf("no packages: send {\"packages\": [\"name==version\", ...]}")
	}
	if len(specs) > MaxSpecs {
		return nil, fmt.Errorf("%d packages in one request, at most %d", len(specs), MaxSpecs)
	}
	out := make([]string, len(specs))
	for i, sp := range specs {
		sp = strings.TrimSpace(sp)
		if len(sp) > MaxSpecLen {
			return nil, fmt.Errorf("package %d: longer than %d bytes", i+1, MaxSpecLen)
		}
		req, err := pep508.ParseRequirement(sp)
		if err != nil {
			return nil, fmt.Errorf("package %q: %w", sp, err)
		}
		if req.URL != "" {
			return nil, fmt.Errorf("package %q: direct URL references are not allowed; name a package and version, or upload the wheel", sp)
		}
		out[i] = sp
	}
	return out, nil
}

func (s *Server) createRequest(w http.ResponseWriter, r *http.Request, t Token) {
	se, ok := s.session(w, r, t, r.PathValue("id"))
	if !ok {
		return
	}
	var specs []string
	var up *Upload
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mt {
	case "multipart/form-data":
		up, ok = s.receiveWheel(w, r, se)
		if !ok {
			return
		}
		// Before any answer: the upload is unpinned and, unless the request now stored
		// holds it (a rejected one does not), deleted.
		w = &beforeWrite{ResponseWriter: w, hook: func() { s.releaseUpload(contextWithoutCancel(r), up) }}
	default: // decodeJSON answers 415 for anything but JSON
		var body packagesBody
		if s.decodeJSON(w, r, &body, false) != nil {
			return
		}
		var err error
		if specs, err = checkSpecs(body.Packages); err != nil {
			writeError(w, http.StatusBadRequest, err.Error(), "write requirements as pip does, e.g. python-docx==1.1.2 or numpy<2")
			return
		}
		if prefersAsync(r) && s.deferClassify(w, r, t, se, specs) {
			return
		}
	}
	req, err := s.o.Classifier.Classify(r.Context(), se, specs, up)
	if errors.Is(err, ErrUnavailable) || err != nil && r.Context().Err() != nil {
		s.unavailable(w, r, fmt.Errorf("classifying a request of session %s: %w", se.ID, err))
		return
	}
	if err != nil {
		s.internal(w, r, fmt.Errorf("classifying a request of session %s: %w", se.ID, err))
		return
	}
	if err := checkClassified(req); err != nil {
		s.internal(w, r, err)
		return
	}
	now := s.o.Now().UTC()
	req.ID, req.SessionID, req.Specs, req.Created, req.Updated = newID("req_"), se.ID, specs, now, now
	req.Upload, req.Approver = "", ""
	if up != nil {
		req.Upload = up.Filename
	}
	created := s.event(t, AuditEvent{Action: "request.create", SessionID: se.ID, RequestID: req.ID,
		Packages: req.Packages, Decision: req.Decision, Detail: strings.Join(req.Reasons, "; ")})
	if b, bound, ok := s.bindNow(se, req); ok {
		// Its layer is published and fits: bound now, no build, nothing queued.
		req.State, req.Digest = StateBound, b.Digest
		if err := s.o.Store.CreateBound(r.Context(), req, b, created, bound); err != nil {
			s.storeError(w, r, err)
			return
		}
		s.Notify(req.ID)
	} else {
		if err := s.o.Store.CreateRequest(r.Context(), req, created); err != nil {
			s.storeError(w, r, err)
			return
		}
		if req.State == StateApproved && s.o.Builder != nil {
			s.o.Builder.Enqueue(context.WithoutCancel(r.Context()), req.ID)
		}
	}
	w.Header().Set("Location", "/v1/requests/"+req.ID)
	writeJSON(w, http.StatusCreated, publicRequest(req))
}

// checkClassified refuses what no Classifier may answer: a state other than approved,
// pending or rejected.
func checkClassified(req Request) error {
	switch req.State {
	case StateApproved, StatePending, StateRejected:
		return nil
	}
	return fmt.Errorf("classifier returned state %q, want approved, pending or rejected", req.State)
}

// bindNow asks the builder, if it can tell, whether an approved request is bound at once.
func (s *Server) bindNow(se Session, req Request) (Binding, AuditEvent, bool) {
	bn, ok := s.o.Builder.(Binder)
	if !ok || req.State != StateApproved {
		return Binding{}, AuditEvent{}, false
	}
	return bn.BindNow(se, req)
}

// beforeWrite runs hook once, before the first byte or status of the answer.
type beforeWrite struct {
	http.ResponseWriter
	hook func()
	done bool
}

func (b *beforeWrite) run() {
	if !b.done {
		b.done = true
		b.hook()
	}
}

func (b *beforeWrite) WriteHeader(code int) { b.run(); b.ResponseWriter.WriteHeader(code) }

func (b *beforeWrite) Write(p []byte) (int, error) { b.run(); return b.ResponseWriter.Write(p) }

func (b *beforeWrite) Unwrap() http.ResponseWriter { return b.ResponseWriter }

// audit writes an event with the token's subject as actor (never the token).
func (s *Server) audit(ctx context.Context, t Token, e AuditEvent) error {
	return s.o.Store.Audit(ctx, s.event(t, e))
}

// event is e done by the token's subject (never the token) now, for a store change that
// appends it in its own transaction.
func (s *Server) event(t Token, e AuditEvent) AuditEvent {
	e.Actor = t.Subject
	e.Time = s.o.Now().UTC()
	return e
}

func (s *Server) getRequest(w http.ResponseWriter, r *http.Request, t Token) {
	id := r.PathValue("id")
	var wait time.Duration
	if v := r.URL.Query().Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("wait=%q is not a duration", v), "e.g. wait=30s; at most 60s")
			return
		}
		wait = min(d, MaxWait)
	}
	var first *waiting
	if wait > 0 { // registered before the read, which then serves as the long poll's first
		ch, release := s.waiters.wait(id)
		first = &waiting{ch, release}
		defer release()
	}
	req, ok := s.request(w, r, t, id)
	if !ok {
		return
	}
	if wait > 0 && !Terminal(req.State) {
		req, ok = s.longPoll(w, r, req, wait, first)
		if !ok {
			return
		}
	}
	writeJSON(w, http.StatusOK, publicRequest(req))
}

// waiting is a long poll's registration with the notifier.
type waiting struct {
	ch      <-chan struct{}
	release func()
}

// Long polls read their request again every Options.Recheck, which bounds how stale one
// can be when a change comes from another process that could not wake it; it is not the
// wake-up path (Notify in process, the store's ChangeFeed across replicas).
const (
	DefaultRecheck     = 2 * time.Second
	DefaultFeedRecheck = 15 * time.Second
)

// longPoll waits until req changes to a terminal state, the wait ends, the server shuts
// down or the client leaves. The write deadline is moved past the wait first (and set
// again when the answer starts): the wait is not the client being slow.
//
// first, if set, was registered before req was read: req is then the first round's read.
func (s *Server) longPoll(w http.ResponseWriter, r *http.Request, req Request, wait time.Duration, first *waiting) (Request, bool) {
	extendDeadlines(w, 0, wait+s.o.HTTP.WriteTimeout)
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		var ch <-chan struct{}
		var release func()
		cur := req
		if first != nil {
			ch, release, first = first.ch, first.release, nil
		} else {
			ch, release = s.waiters.wait(req.ID)
			var err error
			cur, err = s.o.Store.GetRequest(r.Context(), req.ID) // read after registering: no lost wake-up
			if err != nil {
				release()
				s.internal(w, r, err)
				return req, false
			}
		}
		if Terminal(cur.State) || s.stopping.Load() {
			release()
			return cur, true
		}
		tick := time.NewTimer(s.o.Recheck)
		select {
		case <-ch:
		case <-tick.C:
		case <-deadline.C:
			tick.Stop()
			release()
			return cur, true
		case <-r.Context().Done():
			tick.Stop()
			release()
			return cur, false
		}
		tick.Stop()
		release()
	}
}
