package broker

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/pylayer/pylayer/internal/lazyre"
	"github.com/pylayer/pylayer/layers/lock"
)

var digestRE = lazyre.New(`^sha256:[0-9a-f]{64}$`)

// sessionBody is the optional JSON body of POST /v1/sessions.
type sessionBody struct {
	Owner       string  `json:"owner"` // admins only; owners create their own
	Interpreter string  `json:"interpreter"`
	Base        string  `json:"base"`
	BaseLock    jsonRaw `json:"base_lock"`
}

// CreatedSession is the answer to POST /v1/sessions; AgentToken is shown only here.
type CreatedSession struct {
	Session    Session `json:"session"`
	AgentToken string  `json:"agent_token"`
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request, t Token) {
	var b sessionBody
	if s.decodeJSON(w, r, &b, true) != nil {
		return
	}
	owner := t.Subject
	if b.Owner != "" && b.Owner != owner {
		if t.Role != RoleAdmin {
			writeError(w, http.StatusForbidden, "owners create sessions for themselves only", "leave out \"owner\"")
			return
		}
		if !validUser(b.Owner) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("owner %q: want 1-64 of [A-Za-z0-9._@-]", b.Owner), "")
			return
		}
		owner = b.Owner
	}
	for _, d := range []string{b.Interpreter, b.Base} {
		if d != "" && !digestRE().MatchString(d) {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("digest %q: want sha256:<64 hex>", d), "")
			return
		}
	}
	if len(b.BaseLock) > 0 {
		l, err := lock.Parse(b.BaseLock)
		if err != nil {
			writeError(w, http.StatusBadRequest, "base_lock: "+err.Error(), "send the base lock JSON as written by pylayer lock")
			return
		}
		if l.Kind != lock.KindBase {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("base_lock is a %s lock, want base", l.Kind), "")
			return
		}
	}
	if len(b.BaseLock) == 0 && b.Base == "" && s.o.SessionDefaults != nil {
		interp, base, lockBytes, err := s.o.SessionDefaults(r.Context())
		if err != nil {
			s.internal(w, r, fmt.Errorf("finding the current base for a new session: %w", err))
			return
		}
		if b.Interpreter == "" {
			b.Interpreter = interp
		}
		b.Base, b.BaseLock = base, lockBytes
	}
	se := Session{ID: newID("ses_"), Owner: owner, Created: s.o.Now().UTC(), Interpreter: b.Interpreter, Base: b.Base, BaseLock: b.BaseLock}
	secret, hash := NewToken()
	// The session and its agent token in one transaction: a crash or a failed write
	// leaves both or neither, never a session nobody was given a token for.
	if err := s.o.Store.CreateSessionToken(r.Context(), se, Token{Hash: hash, Role: RoleAgent, Subject: se.ID, Created: se.Created},
		s.event(t, AuditEvent{Action: "session.create", SessionID: se.ID, Detail: "owner=" + owner})); err != nil {
		s.storeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/sessions/"+se.ID+"/env")
	writeJSON(w, http.StatusCreated, CreatedSession{Session: se, AgentToken: secret})
}

func (s *Server) listSessions(w http.ResponseWriter, r *http.Request, t Token) {
	q := r.URL.Query()
	lq, owner, ok := ownerList(w, q, t)
	if !ok {
		return
	}
	l, err := s.o.Store.Sessions(r.Context(), SessionFilter{Owner: owner, Since: lq.since, Until: lq.until,
		After: lq.after.key(), Desc: lq.desc, Limit: lq.limit + 1})
	if err != nil {
		s.internal(w, r, err)
		return
	}
	page(w, "sessions", l, lq.limit, func(x Session) string { return keyCursor(x.Created, x.ID, lq.desc) })
}

// ownerList reads a list's paging (parseList) and its ?owner= filter (ownerParam); false
// after answering 400 or 403.
func ownerList(w http.ResponseWriter, q url.Values, t Token) (listQuery, string, bool) {
	lq, err := parseList(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "")
		return lq, "", false
	}
	owner, ok := ownerParam(w, q, t)
	return lq, owner, ok
}

// ownerParam is the ?owner= filter a token may use: any for admins, its own for owners
// (the default); false after answering 403.
func ownerParam(w http.ResponseWriter, q url.Values, t Token) (string, bool) {
	owner := q.Get("owner")
	if t.Role == RoleAdmin {
		return owner, true
	}
	if owner != "" && owner != t.Subject {
		writeError(w, http.StatusForbidden, "owners list their own sessions only", "leave out \"owner\"")
		return "", false
	}
	return t.Subject, true
}

func (s *Server) listRequests(w http.ResponseWriter, r *http.Request, t Token) {
	q := r.URL.Query()
	lq, owner, ok := ownerList(w, q, t)
	if !ok {
		return
	}
	updated, err := parseTime(q, "updated_since")
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "")
		return
	}
	f := RequestFilter{State: State(q.Get("state")), SessionID: q.Get("session"), Owner: owner,
		Since: lq.since, Until: lq.until, UpdatedSince: updated, After: lq.after.key(), Desc: lq.desc, Limit: lq.limit + 1}
	if f.State != "" && !f.State.Valid() {
		names := make([]string, len(States))
		for i, st := range States {
			names[i] = string(st)
		}
		writeError(w, http.StatusBadRequest, fmt.Sprintf("state %q: want one of %s", f.State, strings.Join(names, ", ")), "")
		return
	}
	l, err := s.o.Store.ListRequests(r.Context(), f)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	for i := range l {
		l[i] = publicRequest(l[i])
	}
	page(w, "requests", l, lq.limit, func(x Request) string { return keyCursor(x.Created, x.ID, lq.desc) })
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// errWrongState is returned from an UpdateRequest fn when the request is not pending.
var errWrongState = errors.New("wrong state")

type approveBody struct {
	Isolated bool `json:"isolated"`
}

type denyBody struct {
	Reason string `json:"reason"`
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request, t Token) {
	var b approveBody
	if s.decodeJSON(w, r, &b, true) != nil {
		return
	}
	s.decide(w, r, t, func(req *Request) (string, error) {
		if b.Isolated && !req.Isolated {
			return "", fmt.Errorf("%w: request %s does not offer an isolated layer", ErrInvalid, req.ID)
		}
		req.State, req.Decision = StateApproved, DecisionApproved
		if b.Isolated {
			req.Decision = DecisionApprovedIsolated
		}
		return fmt.Sprintf("isolated=%v", b.Isolated), nil
	})
}

// MaxReason bounds a deny reason.
const MaxReason = 2000

func (s *Server) deny(w http.ResponseWriter, r *http.Request, t Token) {
	var b denyBody
	if s.decodeJSON(w, r, &b, false) != nil {
		return
	}
	b.Reason = strings.TrimSpace(b.Reason)
	if b.Reason == "" || len(b.Reason) > MaxReason {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("a reason of 1 to %d bytes is required", MaxReason), `send {"reason": "..."}; the agent sees it`)
		return
	}
	s.decide(w, r, t, func(req *Request) (string, error) {
		req.State, req.Decision = StateDenied, DecisionDenied
		req.Reasons = append(req.Reasons, "denied by "+t.Subject+": "+b.Reason)
		return b.Reason, nil
	})
}

// decide applies an approver's decision to a pending request, audits it, wakes waiters
// and hands approved requests to the builder.
func (s *Server) decide(w http.ResponseWriter, r *http.Request, t Token, fn func(*Request) (string, error)) {
	req, ok := s.request(w, r, t, r.PathValue("id"))
	if !ok {
		return
	}
	err := s.o.Store.Transition(r.Context(), req.ID, func(q *Request) (AuditEvent, error) {
		if q.State != StatePending {
			return AuditEvent{}, fmt.Errorf("%w: request %s is %s, not pending", errWrongState, q.ID, q.State)
		}
		detail, err := fn(q)
		if err != nil {
			return AuditEvent{}, err
		}
		q.Approver, q.Updated = t.Subject, s.o.Now().UTC()
		req = *q
		return s.event(t, AuditEvent{Action: "request." + q.Decision, SessionID: q.SessionID, RequestID: q.ID,
			Packages: q.Packages, Decision: q.Decision, Detail: detail}), nil
	})
	switch {
	case errors.Is(err, errWrongState):
		writeError(w, http.StatusConflict, strings.TrimPrefix(err.Error(), errWrongState.Error()+": "), "only pending requests can be approved or denied")
		return
	case errors.Is(err, ErrInvalid):
		writeError(w, http.StatusBadRequest, err.Error(), "approve without \"isolated\"")
		return
	case err != nil:
		s.storeError(w, r, err)
		return
	}
	s.Notify(req.ID)
	if req.State == StateApproved && s.o.Builder != nil {
		s.o.Builder.Enqueue(contextWithoutCancel(r), req.ID)
	}
	if req.State == StateDenied && req.Upload != "" { // a denied upload is deleted
		if _, err := s.sweepSession(contextWithoutCancel(r), req.SessionID); err != nil {
			s.log.LogAttrs(r.Context(), slog.LevelWarn, "deleting a denied upload", slog.String("request", req.ID), slog.String("error", err.Error()))
		}
	}
	writeJSON(w, http.StatusOK, publicRequest(req))
}

func (s *Server) rebase(w http.ResponseWriter, r *http.Request, t Token) {
	se, ok := s.session(w, r, t, r.PathValue("id"))
	if !ok {
		return
	}
	if s.o.Rebaser == nil {
		writeError(w, http.StatusNotImplemented, "rebase is not configured on this broker", "")
		return
	}
	id := se.ID
	s.uploads.rebasing(id, true) // its requests move from old bindings to new ones: no sweep in between
	se, err := s.o.Rebaser.Rebase(r.Context(), id, t.Subject)
	s.uploads.rebasing(id, false)
	switch {
	case errors.Is(err, ErrConflict):
		writeError(w, http.StatusConflict, err.Error(), "the session was rebased meanwhile; read it again, and rebase again if it is not on the current base")
		return
	case errors.Is(err, ErrUnavailable):
		s.unavailable(w, r, fmt.Errorf("rebasing session %s: %w", id, err))
		return
	case err != nil:
		s.internal(w, r, fmt.Errorf("rebasing session %s: %w", id, err))
		return
	}
	writeJSON(w, http.StatusOK, se)
}

func (s *Server) layers(w http.ResponseWriter, r *http.Request, t Token) {
	if s.o.Layers == nil {
		writeError(w, http.StatusNotImplemented, "layer listing is not configured on this broker", "")
		return
	}
	l, err := s.o.Layers.Layers(r.Context())
	if err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"layers": nonNil(l)})
}

// gc collects layers no binding holds (when configured) and uploaded wheels no request
// holds: those of denied, rejected and failed requests, of bound requests whose binding
// is gone, and temporary files of uploads that never finished.
func (s *Server) gc(w http.ResponseWriter, r *http.Request, t Token) {
	if s.o.GC == nil && s.o.DataDir == "" {
		writeError(w, http.StatusNotImplemented, "gc is not configured on this broker", "")
		return
	}
	start := time.Now()
	var rep GCReport
	if s.o.GC != nil {
		var err error
		if rep, err = s.o.GC.GC(r.Context()); err != nil {
			s.internal(w, r, err)
			return
		}
	}
	swept, err := s.sweepUploads(r.Context())
	if err != nil {
		s.internal(w, r, err)
		return
	}
	rep.RemovedUploads, rep.FreedBytes = swept.files, rep.FreedBytes+swept.bytes
	if err := s.audit(r.Context(), t, AuditEvent{Action: "gc",
		Detail: fmt.Sprintf("removed %d layers and %d uploads, freed %d bytes in %s", len(rep.Removed), len(rep.RemovedUploads),
			rep.FreedBytes, time.Since(start).Round(time.Millisecond))}); err != nil {
		s.internal(w, r, err)
		return
	}
	rep.Removed = nonNil(rep.Removed)
	writeJSON(w, http.StatusOK, rep)
}

func (s *Server) auditLog(w http.ResponseWriter, r *http.Request, t Token) {
	q := r.URL.Query()
	lq, err := parseList(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "")
		return
	}
	id := q.Get("session")
	if id != "" {
		if _, ok := s.session(w, r, t, id); !ok {
			return
		}
	}
	owner, ok := ownerParam(w, q, t) // an owner sees the events of their sessions only
	if !ok {
		return
	}
	l, err := s.o.Store.AuditEvents(r.Context(), AuditFilter{SessionID: id, Owner: owner, Action: q.Get("action"),
		Since: lq.since, Until: lq.until, AfterID: lq.after.Seq, Desc: lq.desc, Limit: lq.limit + 1})
	if err != nil {
		s.internal(w, r, err)
		return
	}
	for i := range l {
		l[i].Detail = RedactPaths(l[i].Detail)
	}
	page(w, "events", l, lq.limit, func(e AuditEvent) string { return cursor{Seq: e.ID, Desc: lq.desc}.encode() })
}
