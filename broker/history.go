package broker

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Page sizes of the list endpoints (?limit=N).
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
)

// DefaultAuditPruneEvery is how often the broker prunes the audit log under a retention.
const DefaultAuditPruneEvery = time.Hour

// cursor is what an opaque ?cursor= carries: the last row of the page before, and the
// order it was listed in (a cursor of one order means nothing in the other).
type cursor struct {
	Time int64  `json:"t,omitempty"` // (created, id) keyset of sessions and requests
	ID   string `json:"i,omitempty"`
	Seq  int64  `json:"n,omitempty"` // audit event ID
	Desc bool   `json:"d,omitempty"`
}

func (c cursor) encode() string {
	b, _ := json.Marshal(c) // a struct of ints, strings and bools always marshals
	return base64.RawURLEncoding.EncodeToString(b)
}

func (c cursor) key() Key {
	if c.Time == 0 && c.ID == "" {
		return Key{}
	}
	return Key{Time: time.Unix(0, c.Time).UTC(), ID: c.ID}
}

func keyCursor(t time.Time, id string, desc bool) string {
	return cursor{Time: t.UnixNano(), ID: id, Desc: desc}.encode()
}

// listQuery is the paging part of a list request: ?limit, ?cursor, ?order, ?since, ?until.
type listQuery struct {
	limit        int
	after        cursor
	desc         bool
	since, until time.Time
}

// parseList reads the paging parameters of q; the error is a message for a 400.
func parseList(q url.Values) (listQuery, error) {
	l := listQuery{limit: DefaultPageLimit}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return l, fmt.Errorf("limit %q: want a whole number from 1 to %d", v, MaxPageLimit)
		}
		l.limit = min(n, MaxPageLimit)
	}
	switch o := q.Get("order"); o {
	case "", "asc":
	case "desc":
		l.desc = true
	default:
		return l, fmt.Errorf("order %q: want asc (oldest first) or desc (newest first)", o)
	}
	if v := q.Get("cursor"); v != "" {
		b, err := base64.RawURLEncoding.DecodeString(v)
		if err == nil {
			err = json.Unmarshal(b, &l.after)
		}
		if err != nil {
			return l, errors.New("cursor: not one this broker gave; pass next_cursor from the page before as is")
		}
		if l.after.Desc != l.desc {
			return l, errors.New("cursor: it was given for the other order; keep ?order as on the page before")
		}
	}
	var err error
	if l.since, err = parseTime(q, "since"); err != nil {
		return l, err
	}
	if l.until, err = parseTime(q, "until"); err != nil {
		return l, err
	}
	return l, nil
}

// parseTime reads the RFC 3339 time ?name=, zero if absent.
func parseTime(q url.Values, name string) (time.Time, error) {
	v := q.Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return t, fmt.Errorf("%s %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", name, v)
	}
	return t, nil
}

// page is a list answer: the rows under key, and the cursor of the next page if any.
func page[T any](w http.ResponseWriter, key string, rows []T, limit int, next func(T) string) {
	out := map[string]any{key: nonNil(rows)}
	if len(rows) > limit { // one row past the page was read to learn whether more follow
		out[key] = rows[:limit]
		out["next_cursor"] = next(rows[limit-1])
	}
	writeJSON(w, http.StatusOK, out)
}

// auditExport streams the audit events the filters select as NDJSON, oldest first, one
// event a line, reading the store a page at a time so that memory stays flat.
func (s *Server) auditExport(w http.ResponseWriter, r *http.Request, t Token) {
	q := r.URL.Query()
	lq, err := parseList(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "")
		return
	}
	if lq.desc || q.Get("limit") != "" || q.Get("cursor") != "" {
		writeError(w, http.StatusBadRequest, "export takes no limit, cursor or order: it streams every event oldest first", "filter with since, until, session, owner and action")
		return
	}
	f := AuditFilter{SessionID: q.Get("session"), Owner: q.Get("owner"), Action: q.Get("action"),
		Since: lq.since, Until: lq.until, Limit: MaxPageLimit}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	rc := http.NewResponseController(w)
	started := false
	for {
		l, err := s.o.Store.AuditEvents(r.Context(), f)
		if err != nil {
			if !started {
				s.internal(w, r, err)
				return
			}
			// The status is sent: end the stream short, which a reader sees as a last line
			// that is not an event, and log why.
			s.log.ErrorContext(r.Context(), "exporting the audit log", "err", err)
			enc.Encode(map[string]string{"error": "the export stopped early: run it again with since set to the last event's time"}) //nolint:errcheck
			return
		}
		for _, e := range l {
			e.Detail = RedactPaths(e.Detail)
			if err := enc.Encode(e); err != nil {
				return // the client went away
			}
		}
		started = true
		if len(l) < f.Limit {
			return
		}
		f.AfterID = l[len(l)-1].ID
		rc.Flush() //nolint:errcheck // a writer without Flush buffers, which is fine
	}
}

// pruneAudit deletes audit events older than Options.AuditRetention every
// Options.AuditPruneEvery until ctx ends, auditing each run.
func (s *Server) pruneAudit(ctx context.Context) {
	tick := time.NewTicker(s.o.AuditPruneEvery)
	defer tick.Stop()
	for {
		if _, err := s.PruneAudit(ctx); err != nil && ctx.Err() == nil {
			s.log.ErrorContext(ctx, "pruning the audit log", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// PruneAudit deletes the audit events older than Options.AuditRetention once, recording
// the run as an "audit.prune" event; it returns how many went. Without a retention it
// deletes nothing.
func (s *Server) PruneAudit(ctx context.Context) (int64, error) {
	if s.o.AuditRetention <= 0 {
		return 0, nil
	}
	now := s.o.Now().UTC()
	n, err := s.o.Store.PruneAudit(ctx, now.Add(-s.o.AuditRetention),
		AuditEvent{Time: now, Actor: "broker", Action: "audit.prune"})
	if err != nil {
		return 0, fmt.Errorf("pruning audit events older than %s: %w", s.o.AuditRetention, err)
	}
	return n, nil
}
