package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pylayer/pylayer/internal/memo"
)

// A sandbox host of a remote broker (`pylayer serve --broker URL`) serves the executor
// routes alone, with no database: each call is authorised by asking the broker for the
// session's env with the caller's own bearer token, and the session's bindings come from
// that answer.

// Errors of a SessionAuthority: what the broker answered the caller's token.
var (
	// ErrUnauthenticated: the broker knows no such token (401).
	ErrUnauthenticated = errors.New("the broker does not know this token")
	// ErrForbidden: the token may not use the session (403).
	ErrForbidden = errors.New("this token may not use the session")
)

// SessionAuthority asks the broker, with a caller's own bearer token, for a session's
// env (GET /v1/sessions/{id}/env): the broker's answer is the authorisation. Errors wrap
// ErrUnauthenticated (401), ErrForbidden (403), ErrNotFound (404) or ErrUnavailable (the
// broker did not answer). broker/client's Authority is one.
type SessionAuthority interface {
	SessionEnv(ctx context.Context, token, sessionID string) (Env, error)
}

// Limits of ExecHostOptions.GrantTTL.
const (
	DefaultGrantTTL = 2 * time.Second
	MaxGrantTTL     = 10 * time.Second
)

// maxGrants bounds the grants an exec host keeps: one per live (token, session).
const maxGrants = 1 << 14

// ExecHostOptions configure NewExecHost. Executor and Authority are required.
type ExecHostOptions struct {
	Executor  Executor
	Authority SessionAuthority
	// GrantTTL is how long the broker's yes for a (token, session) is used without asking
	// again, and so how late a rebind or a revoked token is seen here: 0 is
	// DefaultGrantTTL, at most MaxGrantTTL, < 0 asks on every call. A refusal is never kept.
	GrantTTL time.Duration
	// Ready, if set, is GET /readyz's check (the broker answers, say); nil: ready.
	Ready  func(ctx context.Context) error
	Logger *slog.Logger // nil: discard
	HTTP   HTTPLimits   // as Options.HTTP
}

// grant is what the broker answered one (token, session): the session and its bindings.
type grant struct{ env Env }

type grantKey struct{}

// grantFrom returns the grant an exec host's call was authorised with.
func grantFrom(ctx context.Context) (*grant, bool) {
	g, ok := ctx.Value(grantKey{}).(*grant)
	return g, ok
}

// GrantedSessions is the SessionSource of a sandbox host (NewExecHost): the session and
// its bindings as the broker answered the call being served, read from its context. Out
// of such a call it knows no session.
var GrantedSessions SessionSource = grantedSessions{}

type grantedSessions struct{}

func (grantedSessions) GetSession(ctx context.Context, id string) (Session, error) {
	g, ok := grantFrom(ctx)
	if !ok || g.env.Session.ID != id {
		return Session{}, fmt.Errorf("session %s: %w: no answer of the broker for it in this call", id, ErrNotFound)
	}
	return g.env.Session, nil
}

func (grantedSessions) Bindings(ctx context.Context, id string) ([]Binding, error) {
	g, ok := grantFrom(ctx)
	if !ok || g.env.Session.ID != id {
		return nil, fmt.Errorf("session %s: %w: no answer of the broker for it in this call", id, ErrNotFound)
	}
	return append([]Binding(nil), g.env.Bindings...), nil
}

// NewExecHost returns the handler of a sandbox host serving a remote broker: the
// executor routes, GET /healthz, /readyz, /metrics (HTTP and runtime metrics) and
// /openapi.json, under the same HTTP limits as the broker (Serve, HTTPServer). It has no
// store: nothing is audited here, and each exec or shell call's log line (session,
// subject, run, kind, the code's sha256 and size, status, duration) is its record.
func NewExecHost(o ExecHostOptions) (*Server, error) {
	if o.Executor == nil || o.Authority == nil {
		return nil, errors.New("broker: ExecHostOptions.Executor and Authority are required")
	}
	ttl := o.GrantTTL
	switch {
	case ttl == 0:
		ttl = DefaultGrantTTL
	case ttl > MaxGrantTTL:
		return nil, fmt.Errorf("broker: a grant kept %s is past the limit of %s: a rebind or a revoked token would go unseen that long", ttl, MaxGrantTTL)
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	so := Options{Executor: o.Executor, Logger: log, HTTP: o.HTTP.withDefaults(), Now: time.Now}
	s := &Server{o: so, log: log, mux: http.NewServeMux(), metrics: newMetrics(), waiters: newNotifier(),
		ui: newUIState(SignInLimits{}.withDefaults())}
	h := &execHost{s: s, auth: o.Authority, ready: o.Ready}
	if ttl > 0 {
		h.grants = memo.New[*grant](maxGrants, ttl)
	}
	for _, rt := range []route{
		{"GET /healthz", public, s.healthz},
		{"GET /readyz", public, h.readyz},
		{"GET /metrics", public, h.metrics},
		{"GET /openapi.json", public, s.openapi},
	} {
		s.routes = append(s.routes, rt.pattern)
		s.mux.Handle(rt.pattern, s.authed(rt.acc, rt.h))
	}
	for _, rt := range s.executorRoutes() {
		s.routes = append(s.routes, rt.pattern)
		s.mux.Handle(rt.pattern, h.authed(rt.h))
	}
	return s, nil
}

// execHost is NewExecHost's part of its Server.
type execHost struct {
	s      *Server
	auth   SessionAuthority
	grants *memo.Cache[*grant] // by token hash and session; nil: ask every call
	ready  func(ctx context.Context) error
}

// bearer is the request's token secret, checked as the broker checks it.
func bearer(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	scheme, secret, ok := strings.Cut(h, " ")
	switch {
	case h == "":
		return "", fmt.Errorf("%w: no bearer token", errUnauthenticated)
	case !ok || !strings.EqualFold(scheme, "Bearer") || len(secret) > maxSecret || !strings.HasPrefix(secret, TokenPrefix):
		return "", fmt.Errorf("%w: malformed Authorization header, want: Bearer pyl_...", errUnauthenticated)
	}
	return secret, nil
}

// authed authorises an executor route's call with the broker: the session of {id}, or of
// the run {run_id}, as the broker answers the caller's token. The handler gets the
// grant in its request's context, and a Token whose subject names the token by a prefix
// of its hash (the broker's answer does not say whose it is).
func (h *execHost) authed(next func(http.ResponseWriter, *http.Request, Token)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secret, err := bearer(r)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="pylayer"`)
			writeError(w, http.StatusUnauthorized, err.Error(), "send Authorization: Bearer <token>, the token the broker gave you")
			return
		}
		hash := HashToken(secret)
		t := Token{Subject: "token:" + hash[:12]}
		if in, ok := r.Context().Value(infoKey{}).(*info); ok {
			in.subject = t.Subject
		}
		sid := r.PathValue("id")
		if sid == "" { // POST /v1/runs/{run_id}/cancel
			run := r.PathValue("run_id")
			var ok bool
			if sid, ok = h.s.o.Executor.RunSession(run); !ok {
				writeError(w, http.StatusNotFound, "no run "+run+" on this host", "GET /v1/sessions/{id}/runs lists a session's recent runs")
				return
			}
		}
		if !plainID(sid) {
			// The id is a path segment of the broker's URL that the caller's token goes to.
			writeError(w, http.StatusBadRequest, fmt.Sprintf("session id %q is not one", sid),
				"a session id is up to 128 letters, digits, '.', '_' or '-', not starting with '.' (ses_...)")
			return
		}
		g, err := h.grant(r.Context(), secret, hash, sid)
		if err != nil {
			h.refuse(w, r, sid, err)
			return
		}
		next(w, r.WithContext(context.WithValue(r.Context(), grantKey{}, g)), t)
	})
}

// plainID reports whether id can be a session's id: one path segment that no URL
// resolution changes (no "." or "..", no slash, nothing escaped).
func plainID(id string) bool {
	if id == "" || id[0] == '.' || len(id) > 128 {
		return false
	}
	for _, c := range []byte(id) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// grant asks the broker for sid with secret, or takes its answer of moments ago.
func (h *execHost) grant(ctx context.Context, secret, hash, sid string) (*grant, error) {
	key := hash + "/" + sid
	if h.grants != nil {
		if g, ok := h.grants.Get(key); ok {
			return g, nil
		}
	}
	env, err := h.auth.SessionEnv(ctx, secret, sid)
	if err != nil {
		return nil, err
	}
	if env.Session.ID != sid {
		return nil, fmt.Errorf("the broker answered session %q for %q", env.Session.ID, sid)
	}
	g := &grant{env: env}
	if h.grants != nil {
		h.grants.Put(key, g)
	}
	return g, nil
}

// refuse answers the broker's no (401, 403, 404) as the broker did, and its silence 503.
func (h *execHost) refuse(w http.ResponseWriter, r *http.Request, sid string, err error) {
	switch {
	case errors.Is(err, ErrUnauthenticated):
		w.Header().Set("WWW-Authenticate", `Bearer realm="pylayer"`)
		writeError(w, http.StatusUnauthorized, "unauthenticated: the broker does not know this token", "send the token the broker gave you")
	case errors.Is(err, ErrForbidden):
		writeError(w, http.StatusForbidden, "this token may not use session "+sid, "")
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, "session "+sid+" not found on the broker", "")
	case errors.Is(err, ErrUnavailable):
		h.s.log.LogAttrs(r.Context(), slog.LevelWarn, "the broker did not answer", slog.String("session", sid), slog.String("error", err.Error()))
		w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
		writeError(w, http.StatusServiceUnavailable, "the broker did not answer whether this token may use the session; nothing ran", "retry after the Retry-After header's seconds")
	default:
		h.s.internal(w, r, fmt.Errorf("asking the broker for session %s: %w", sid, err))
	}
}

// readyz is ready unless shutting down or Ready fails.
func (h *execHost) readyz(w http.ResponseWriter, r *http.Request, _ Token) {
	notReady := func(reason, hint string) {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "error": reason, "hint": hint})
	}
	if h.s.stopping.Load() {
		notReady("the sandbox host is shutting down", "send calls to another host")
		return
	}
	if h.ready != nil {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		if err := h.ready(ctx); err != nil {
			h.s.log.LogAttrs(r.Context(), slog.LevelError, "readiness", slog.String("error", err.Error()))
			notReady("the broker does not answer", "check that the broker at --broker runs; this host's log has the cause")
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// metrics is the exposition of an exec host: HTTP and runtime metrics (it has no store).
func (h *execHost) metrics(w http.ResponseWriter, r *http.Request, _ Token) {
	var e expo
	h.s.metrics.write(&e)
	writeRuntime(&e)
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(e.b.Bytes())
}
