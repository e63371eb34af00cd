package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pylayer/pylayer/internal/memo"
)

// Default limits.
const (
	DefaultMaxBody   = 1 << 20   // JSON bodies
	DefaultMaxUpload = 256 << 20 // uploaded wheels
	MaxWait          = 60 * time.Second
)

// Options configure a Server. Store and Classifier are required.
type Options struct {
	Store      Store
	Builder    Builder    // nil: approved requests stay approved
	Classifier Classifier // required
	Rebaser    Rebaser    // nil: rebase answers 501
	Executor   Executor   // warm sessions (executor.go); nil: their routes answer 501
	Layers     LayerLister
	GC         GCer
	// SessionDefaults, when set, gives a session created without a base its interpreter,
	// base and base lock: the deployment's current ones.
	SessionDefaults func(ctx context.Context) (interpreter, base string, baseLock []byte, err error)
	Logger          *slog.Logger // nil: discard
	DataDir         string       // where uploaded wheels are kept; "": uploads answer 501
	MaxBody         int64        // default DefaultMaxBody
	MaxUpload       int64        // one uploaded wheel; default DefaultMaxUpload
	Now             func() time.Time
	// Recheck is how often a long poll reads its request again in case a change went
	// unannounced (default 2s; 15s over a store that is a ChangeFeed, which announces
	// every replica's changes).
	Recheck time.Duration

	HTTP   HTTPLimits   // timeouts, header and connection limits (HTTPServer, Serve)
	Quota  UploadQuota  // uploaded wheels a session holds at once
	SignIn SignInLimits // the web page's sign-ins

	// AuditRetention, if set, is how long audit events are kept: Serve deletes older
	// ones every AuditPruneEvery (default DefaultAuditPruneEvery), auditing each run.
	AuditRetention  time.Duration
	AuditPruneEvery time.Duration

	// ClassifyStale is how long a request may stay classifying untouched before a sweep
	// takes it as abandoned by a replica that died (classifying.go); default
	// DefaultClassifyStale.
	ClassifyStale time.Duration
}

// Server is the broker's HTTP API.
type Server struct {
	o       Options
	log     *slog.Logger
	mux     *http.ServeMux
	routes  []string
	metrics *metrics
	waiters *notifier
	ui      *uiState    // the web page's sign-ins and change counter (ui.go)
	uploads *uploadBook // the uploaded wheels and their quota (uploadstore.go)

	bases  *memo.Cache[[]EnvPackage] // a stored base lock's packages, by the sha256 of its bytes
	tokens *memo.Cache[Token]        // tokens found in the store, by hash, for tokenTTL
	states *memo.Cache[sessionState] // what env shows of a session, by ID, with its version

	live     sync.Map    // session ID -> the run ID of its exec running here (executor_http.go)
	stopping atomic.Bool // Serve is shutting down: long polls answer at once
	feed     feedState   // the store's change feed, if it has one (notify.go)
	bg       *background // classifications of asynchronous requests (classifying.go)
}

var _ http.Handler = (*Server)(nil)

// auth levels of a route.
type access int

const (
	public    access = iota // no token
	anyRole                 // agent, owner or admin; handlers check the session
	approver                // owner or admin
	adminOnly               // admin
)

// NewServer checks o and builds the handler.
func NewServer(o Options) (*Server, error) {
	if o.Store == nil || o.Classifier == nil {
		return nil, errors.New("broker: Options.Store and Options.Classifier are required")
	}
	if o.MaxBody <= 0 {
		o.MaxBody = DefaultMaxBody
	}
	if o.MaxUpload <= 0 {
		o.MaxUpload = DefaultMaxUpload
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.ClassifyStale <= 0 {
		o.ClassifyStale = DefaultClassifyStale
	}
	if o.AuditPruneEvery <= 0 {
		o.AuditPruneEvery = DefaultAuditPruneEvery
	}
	if o.Recheck <= 0 {
		o.Recheck = DefaultRecheck
		if _, ok := o.Store.(ChangeFeed); ok {
			o.Recheck = DefaultFeedRecheck
		}
	}
	o.HTTP, o.Quota, o.SignIn = o.HTTP.withDefaults(), o.Quota.withDefaults(), o.SignIn.withDefaults()
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{o: o, log: log, mux: http.NewServeMux(), metrics: newMetrics(), waiters: newNotifier(), bg: newBackground(),
		ui: newUIState(o.SignIn), uploads: newUploadBook(o.DataDir, o.Quota), bases: memo.New[[]EnvPackage](maxBases, 0),
		tokens: memo.New[Token](maxTokens, tokenTTL), states: memo.New[sessionState](maxSessionStates, 0)}
	for _, rt := range append([]route{
		{"GET /healthz", public, s.healthz},
		{"GET /readyz", public, s.readyz},
		{"GET /metrics", public, s.serveMetrics},
		{"GET /openapi.json", public, s.openapi},
		{"GET /v1/sessions/{id}/env", anyRole, s.env},
		{"POST /v1/sessions/{id}/requests", anyRole, s.createRequest},
		{"GET /v1/requests/{id}", anyRole, s.getRequest},
		{"POST /v1/sessions", approver, s.createSession},
		{"GET /v1/sessions", approver, s.listSessions},
		{"GET /v1/requests", approver, s.listRequests},
		{"POST /v1/requests/{id}/approve", approver, s.approve},
		{"POST /v1/requests/{id}/deny", approver, s.deny},
		{"POST /v1/sessions/{id}/rebase", approver, s.rebase},
		{"GET /v1/layers", approver, s.layers},
		{"POST /v1/gc", adminOnly, s.gc},
		{"GET /v1/audit", approver, s.auditLog},
		{"GET /v1/audit/export", adminOnly, s.auditExport},
	}, s.executorRoutes()...) {
		s.routes = append(s.routes, rt.pattern)
		s.mux.Handle(rt.pattern, s.authed(rt.acc, rt.h))
	}
	for _, rt := range s.uiRoutes() { // the web page: not API, not in Routes or openapi.json
		s.mux.Handle(rt.pattern, s.authed(rt.acc, rt.h))
	}
	return s, nil
}

// route is one registered pattern with its access level.
type route struct {
	pattern string
	acc     access
	h       func(http.ResponseWriter, *http.Request, Token)
}

// Routes lists the API's registered patterns ("METHOD /path"); the web page's (ui.go) are not API.
func (s *Server) Routes() []string { return append([]string(nil), s.routes...) }

// info is what the logging middleware learns while a request is served.
type info struct {
	subject, role string
}

type infoKey struct{}

// statusWriter records the status code, and starts the write timeout when the answer
// starts (see answering).
type statusWriter struct {
	http.ResponseWriter
	code         int
	writeTimeout time.Duration
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
		answering(w.ResponseWriter, w.writeTimeout)
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
		answering(w.ResponseWriter, w.writeTimeout)
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ServeHTTP logs one line per request and records metrics. Neither ever sees the
// Authorization header: only the authenticated subject and role.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	in := &info{}
	r = r.WithContext(context.WithValue(r.Context(), infoKey{}, in))
	sw := &statusWriter{ResponseWriter: w, writeTimeout: s.o.HTTP.WriteTimeout}
	_, pattern := s.mux.Handler(r)
	if pattern == "" {
		s.unmatched(sw, r)
		pattern = "unmatched"
	} else {
		s.mux.ServeHTTP(sw, r)
	}
	if sw.code == 0 {
		sw.code = http.StatusOK
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead && sw.code < 300 {
		s.ui.changed() // the web page refetches
	}
	d := time.Since(start)
	s.metrics.observe(pattern, sw.code, d)
	level := slog.LevelInfo
	if pattern == "GET /ui/version" || pattern == "GET /healthz" || pattern == "GET /readyz" || pattern == "GET /metrics" {
		level = slog.LevelDebug // polled every few seconds; at info they would drown the log
	}
	s.log.LogAttrs(r.Context(), level, "http",
		slog.String("method", r.Method), slog.String("route", pattern), slog.Int("status", sw.code),
		slog.Duration("duration", d), slog.String("subject", in.subject), slog.String("role", in.role))
}

// unmatched answers 404 or 405 (with Allow) as JSON instead of the mux's plain text.
func (s *Server) unmatched(w http.ResponseWriter, r *http.Request) {
	rec := &headerRecorder{h: http.Header{}}
	s.mux.ServeHTTP(rec, r)
	if rec.code == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", rec.h.Get("Allow"))
		writeError(w, http.StatusMethodNotAllowed, "method "+r.Method+" not allowed on "+r.URL.Path, "see /openapi.json")
		return
	}
	writeError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path, "see /openapi.json")
}

type headerRecorder struct {
	h    http.Header
	code int
}

func (h *headerRecorder) Header() http.Header         { return h.h }
func (h *headerRecorder) Write(b []byte) (int, error) { return len(b), nil }
func (h *headerRecorder) WriteHeader(code int)        { h.code = code }

// apiError is the JSON body of every error.
type apiError struct {
	Error string `json:"error"`
	Hint  string `json:"hint,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	// Compact: agents poll these answers, and indenting them cost the broker a second
	// pass over every answer and both sides the bytes (jq or the CLI prints them readably).
	_ = json.NewEncoder(w).Encode(v) // the client went away; nothing to do
}

func writeError(w http.ResponseWriter, code int, msg, hint string) {
	writeJSON(w, code, apiError{Error: msg, Hint: hint})
}

// internal answers 500 and logs the cause; the client gets no internals.
func (s *Server) internal(w http.ResponseWriter, r *http.Request, err error) {
	s.log.LogAttrs(r.Context(), slog.LevelError, "internal error", slog.String("route", r.Pattern), slog.String("error", err.Error()))
	writeError(w, http.StatusInternalServerError, "internal error", "try again; if it persists, the broker's log has the cause")
}

// RetryAfter is what a 503 tells the client to wait before trying again.
const RetryAfter = 5 * time.Second

// unavailable answers 503 with Retry-After: something the broker depends on failed in a
// way that may pass, and nothing was decided.
func (s *Server) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	s.log.LogAttrs(r.Context(), slog.LevelWarn, "unavailable", slog.String("route", r.Pattern), slog.String("error", err.Error()))
	w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
	writeError(w, http.StatusServiceUnavailable, "temporarily unavailable: the package index or registry did not answer; nothing was decided", "retry after the Retry-After header's seconds")
}

// storeError maps a store error to a status.
func (s *Server) storeError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		writeError(w, http.StatusNotFound, err.Error(), "")
	case errors.Is(err, ErrConflict):
		writeError(w, http.StatusConflict, err.Error(), "")
	case errors.Is(err, ErrUnavailable):
		s.unavailable(w, r, err)
	default:
		s.internal(w, r, err)
	}
}

// errBadBody is a body that could not be decoded; its status was written already.
var errBadBody = errors.New("bad body")

// decodeJSON reads one JSON object into v, strictly. optional allows an empty body.
// On failure it writes the error response (400, 413 or 415) and returns errBadBody.
func (s *Server) decodeJSON(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	return s.decodeJSONMax(w, r, v, optional, s.o.MaxBody)
}

// decodeJSONMax is decodeJSON with a body of up to limit bytes.
func (s *Server) decodeJSONMax(w http.ResponseWriter, r *http.Request, v any, optional bool, limit int64) error {
	body := http.MaxBytesReader(w, r.Body, limit)
	if r.Header.Get("Content-Type") == "" && optional {
		var one [1]byte
		if n, _ := io.ReadFull(body, one[:]); n == 0 {
			return nil
		}
		writeError(w, http.StatusUnsupportedMediaType, "a body needs Content-Type: application/json", "")
		return errBadBody
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "Content-Type must be application/json", "")
		return errBadBody
	}
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if optional && err == io.EOF { // Content-Type given, body empty
		return nil
	}
	if err == nil && dec.More() {
		err = errors.New("trailing data after the JSON object")
	}
	if err == nil {
		if _, e := dec.Token(); e != io.EOF {
			err = errors.New("trailing data after the JSON object")
		}
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", limit), "")
			return errBadBody
		}
		if errTimeout(err) {
			s.bodyError(w, "reading the body", err)
			return errBadBody
		}
		writeError(w, http.StatusBadRequest, "malformed JSON body: "+err.Error(), "see /openapi.json for the request schema")
		return errBadBody
	}
	return nil
}

// healthz is liveness: the process answers.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request, _ Token) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyTimeout bounds the store's write check of GET /readyz.
const readyTimeout = 5 * time.Second

// readyz is readiness: 200 only when the store accepts a write, 503 with the reason
// otherwise (the cause, which may name host paths, goes to the log only).
func (s *Server) readyz(w http.ResponseWriter, r *http.Request, _ Token) {
	notReady := func(reason, hint string) {
		w.Header().Set("Retry-After", "5")
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "error": reason, "hint": hint})
	}
	if s.stopping.Load() {
		notReady("the broker is shutting down", "send requests to another instance")
		return
	}
	wc, ok := s.o.Store.(WriteChecker)
	if !ok {
		notReady("this store cannot check that it accepts writes", "use a store that implements broker.WriteChecker (the SQLite store does)")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if err := wc.CheckWrite(ctx); err != nil {
		s.log.LogAttrs(r.Context(), slog.LevelError, "readiness: the store refuses writes", slog.String("error", err.Error()))
		notReady("the store does not accept writes", "check the database file's disk space, permissions and locks; the broker's log has the cause")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// jsonRaw is an optional raw JSON value; null counts as absent.
type jsonRaw []byte

func (j *jsonRaw) UnmarshalJSON(b []byte) error {
	if string(b) != "null" {
		*j = append((*j)[:0], b...)
	}
	return nil
}

func contextWithoutCancel(r *http.Request) context.Context { return context.WithoutCancel(r.Context()) }
