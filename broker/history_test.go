package broker_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker"
)

// pages follows next_cursor from path (which has a query) and returns each page's rows
// under key as raw JSON objects, failing past limit rows a page.
func (e *env) pages(path, token, key string, limit int) []map[string]any {
	e.t.Helper()
	var all []map[string]any
	cur := ""
	for range 1000 {
		p := path + "&limit=" + fmt.Sprint(limit)
		if cur != "" {
			p += "&cursor=" + url.QueryEscape(cur)
		}
		var page map[string]json.RawMessage
		e.mustDo("GET", p, token, "", "", http.StatusOK, &page)
		var rows []map[string]any
		if err := json.Unmarshal(page[key], &rows); err != nil {
			e.t.Fatalf("GET %s: %s: %v", p, key, err)
		}
		if len(rows) > limit {
			e.t.Fatalf("GET %s: %d rows, limit %d", p, len(rows), limit)
		}
		all = append(all, rows...)
		cur = ""
		if c, ok := page["next_cursor"]; ok {
			json.Unmarshal(c, &cur)
		}
		if cur == "" {
			return all
		}
		if len(rows) != limit {
			e.t.Fatalf("GET %s: a short page (%d of %d) with a next_cursor", p, len(rows), limit)
		}
	}
	e.t.Fatal("paging does not end")
	return nil
}

func ids(rows []map[string]any, key string) []string {
	var out []string
	for _, r := range rows {
		out = append(out, fmt.Sprint(r[key]))
	}
	return out
}

func TestListPaging(t *testing.T) {
	e := newEnv(t, nil)
	want := []string{e.sesA, e.sesB}
	for range 5 {
		id, _ := e.newSession(e.alice)
		want = append(want, id)
	}
	got := ids(e.pages("/v1/sessions?", e.admin, "sessions", 2), "id")
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("sessions paged by 2 = %v, want %v", got, want)
	}
	// An owner sees only their own, and may not ask for another owner's.
	if got := e.pages("/v1/sessions?order=desc", e.bob, "sessions", 3); len(got) != 1 || got[0]["id"] != e.sesB {
		t.Errorf("bob's sessions = %v, want only %s", got, e.sesB)
	}
	if code, _, b := e.do("GET", "/v1/sessions?owner=alice", e.bob, "", ""); code != http.StatusForbidden {
		t.Errorf("bob listing alice's sessions: %d %s, want 403", code, b)
	}
	if got := e.pages("/v1/sessions?owner=bob", e.admin, "sessions", 3); len(got) != 1 {
		t.Errorf("admin, owner=bob: %d sessions, want 1", len(got))
	}

	var reqs []string
	for i := range 5 {
		reqs = append(reqs, e.request(e.agentA, e.sesA, fmt.Sprintf(`"pend%d"`, i)).ID)
	}
	e.request(e.agentB, e.sesB, `"foo"`)
	got = ids(e.pages("/v1/requests?session="+e.sesA+"&state=pending", e.alice, "requests", 2), "id")
	if fmt.Sprint(got) != fmt.Sprint(reqs) {
		t.Errorf("alice's pending requests = %v, want %v", got, reqs)
	}
	if got := e.pages("/v1/requests?state=approved", e.alice, "requests", 10); len(got) != 0 {
		t.Errorf("alice sees %d approved requests; only bob has one", len(got))
	}

	got = ids(e.pages("/v1/audit?action=session.create&order=desc", e.admin, "events", 3), "session_id")
	if len(got) != len(want) || got[0] != want[len(want)-1] || got[len(got)-1] != want[0] {
		t.Errorf("session.create events newest first = %v, want the reverse of %v", got, want)
	}
	if got := e.pages("/v1/audit?action=request.create", e.bob, "events", 10); len(got) != 1 {
		t.Errorf("bob's request events: %d, want 1 (his sessions' only)", len(got))
	}

	for _, bad := range []string{"limit=0", "limit=x", "cursor=nope", "order=sideways", "since=yesterday", "until=1"} {
		if code, _, b := e.do("GET", "/v1/requests?"+bad, e.admin, "", ""); code != http.StatusBadRequest {
			t.Errorf("?%s: %d %s, want 400", bad, code, b)
		}
	}
	// A cursor of one order is refused in the other.
	var page struct {
		NextCursor string `json:"next_cursor"`
	}
	e.mustDo("GET", "/v1/sessions?limit=1", e.admin, "", "", http.StatusOK, &page)
	if code, _, _ := e.do("GET", "/v1/sessions?limit=1&order=desc&cursor="+page.NextCursor, e.admin, "", ""); code != http.StatusBadRequest {
		t.Errorf("an asc cursor with order=desc: %d, want 400", code)
	}
}

// TestListUpdatedSince: the web page asks only for what changed since its last look.
func TestListUpdatedSince(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := func() time.Time { return now }
	e := newEnv(t, func(o *broker.Options) { o.Now = clock })
	r1 := e.request(e.agentA, e.sesA, `"pend1"`)
	e.request(e.agentA, e.sesA, `"pend2"`)
	now = now.Add(time.Minute)
	e.mustDo("POST", "/v1/requests/"+r1.ID+"/deny", e.alice, "application/json", `{"reason":"no"}`, http.StatusOK, nil)
	got := e.pages("/v1/requests?updated_since="+now.Format(time.RFC3339Nano), e.alice, "requests", 10)
	if len(got) != 1 || got[0]["id"] != r1.ID || got[0]["state"] != "denied" {
		t.Errorf("changed since the deny: %v, want only %s, denied", got, r1.ID)
	}
}

func TestAuditExport(t *testing.T) {
	e := newEnv(t, nil)
	for i := range 3 {
		e.request(e.agentA, e.sesA, fmt.Sprintf(`"pend%d"`, i))
	}
	if code, _, _ := e.do("GET", "/v1/audit/export", e.alice, "", ""); code != http.StatusForbidden {
		t.Errorf("an owner exporting: %d, want 403", code)
	}
	if code, _, _ := e.do("GET", "/v1/audit/export?limit=3", e.admin, "", ""); code != http.StatusBadRequest {
		t.Errorf("export with a limit: %d, want 400", code)
	}
	code, h, b := e.do("GET", "/v1/audit/export?session="+e.sesA, e.admin, "", "")
	if code != http.StatusOK || h.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("export: %d %s %s", code, h.Get("Content-Type"), b)
	}
	var got []broker.AuditEvent
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var ev broker.AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.ID == 0 {
			t.Fatalf("line %q: not an event (%v)", sc.Text(), err)
		}
		got = append(got, ev)
	}
	want, err := e.store.AuditLog(context.Background(), e.sesA)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(got) < 4 {
		t.Fatalf("exported %d events of %s, the store has %d (want >= 4)", len(got), e.sesA, len(want))
	}
	for i := range got {
		if got[i].ID != want[i].ID || got[i].Action != want[i].Action {
			t.Errorf("event %d: exported %d %s, stored %d %s", i, got[i].ID, got[i].Action, want[i].ID, want[i].Action)
		}
	}
}

func TestAuditExportPages(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	n := broker.MaxPageLimit + 7 // more than one store page
	for i := range n {
		if err := e.store.Audit(ctx, broker.AuditEvent{Actor: "x", Action: "bulk", Detail: fmt.Sprint(i)}); err != nil {
			t.Fatal(err)
		}
	}
	_, _, b := e.do("GET", "/v1/audit/export?action=bulk", e.admin, "", "")
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != n {
		t.Fatalf("exported %d lines, want %d", len(lines), n)
	}
	var last broker.AuditEvent
	json.Unmarshal([]byte(lines[n-1]), &last)
	if last.Detail != fmt.Sprint(n-1) {
		t.Errorf("last line %s, want detail %d", lines[n-1], n-1)
	}
}

func TestAuditRetention(t *testing.T) {
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	e := newEnv(t, func(o *broker.Options) {
		o.Now = func() time.Time { return now }
		o.AuditRetention = 90 * 24 * time.Hour
	})
	ctx := context.Background()
	for _, age := range []int{100, 91, 89} {
		if err := e.store.Audit(ctx, broker.AuditEvent{Time: now.Add(-time.Duration(age) * 24 * time.Hour), Actor: "x", Action: fmt.Sprint("aged", age)}); err != nil {
			t.Fatal(err)
		}
	}
	n, err := e.srv.PruneAudit(ctx)
	if err != nil || n != 2 {
		t.Fatalf("PruneAudit = %d, %v; want the 2 events older than 90 days", n, err)
	}
	l, _ := e.store.AuditEvents(ctx, broker.AuditFilter{Action: "audit.prune"})
	if len(l) != 1 || l[0].Actor != "broker" || !strings.Contains(l[0].Detail, "removed 2 events") {
		t.Errorf("the prune's own event: %+v", l)
	}
	if l, _ := e.store.AuditEvents(ctx, broker.AuditFilter{Action: "aged89"}); len(l) != 1 {
		t.Errorf("the 89-day-old event went too")
	}
}

// TestAuditRetentionServe: Serve prunes periodically on its own, and each run is audited.
func TestAuditRetentionServe(t *testing.T) {
	e := newEnv(t, func(o *broker.Options) {
		o.AuditRetention = time.Hour
		o.AuditPruneEvery = time.Millisecond
	})
	ctx := context.Background()
	if err := e.store.Audit(ctx, broker.AuditEvent{Time: time.Now().Add(-2 * time.Hour), Actor: "x", Action: "old"}); err != nil {
		t.Fatal(err)
	}
	e.serve(t)
	deadline := time.Now().Add(failsafe)
	for {
		runs, err := e.store.AuditEvents(ctx, broker.AuditFilter{Action: "audit.prune"})
		if err != nil {
			t.Fatal(err)
		}
		if len(runs) >= 2 { // at start and at least one tick after
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Serve pruned %d times in %s, want at least 2", len(runs), failsafe)
		}
		time.Sleep(5 * time.Millisecond) // polling for the condition, not waiting for it to happen
	}
	if l, _ := e.store.AuditEvents(ctx, broker.AuditFilter{Action: "old"}); len(l) != 0 {
		t.Errorf("the two-hour-old event survived a one-hour retention")
	}
}
