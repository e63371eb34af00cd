package e2e

import (
	"context"
	"testing"
	"time"
)

// TestWebRecentRuns: a session card on the web page lists the session's recent exec and
// shell runs on the broker's host, newest first, each with its kind and status, without a
// reload as runs happen.
func TestWebRecentRuns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	b := startExBroker(ctx, t)
	s := b.session(t)
	ok1 := b.exec(t, s, "x = 1", 60)
	failed := b.exec(t, s, "raise ValueError('no')", 60)
	if ok1.Status != "ok" || failed.Status != "error" {
		t.Fatalf("the runs: %+v, %+v", ok1, failed)
	}

	br := webStart(t, t.TempDir())
	br.viewport(1280, 900)
	br.open(b.url + "/")
	br.waitJS("the sign-in form", `return !document.getElementById("login").hidden`)
	br.typeInto("#token", b.owner, true)
	br.click(`#login-form button[type=submit]`)
	br.waitJS("the signed-in page", `return !document.getElementById("app").hidden`)
	br.click(`[data-view="sessions"]`)
	// rows keyed by run id, newest first, with the status badge and the code's first line
	const runsJS = `const card = document.querySelector('[data-session="' + arguments[0] + '"]');
		if (!card) return false;
		const rows = [...card.querySelectorAll('[aria-label^="Recent runs"] tr[data-key]')].filter((r) => arguments[1].includes(r.dataset.key));
		return rows.map((r) => [r.dataset.key, r.querySelector('.badge').textContent, r.querySelector('code.summary').textContent,
			r.querySelector('td[data-label="Kind"]').textContent]);`
	br.waitJS("both runs on the session card", `const got = (function() {`+runsJS+`}).apply(null, arguments);
		return !!got && got.length === 2 &&
			got[0][0] === arguments[1][1] && got[0][1] === "error" && got[0][2] === "raise ValueError('no')" && got[0][3] === "exec" &&
			got[1][0] === arguments[1][0] && got[1][1] === "ok" && got[1][2] === "x = 1"`, s.id, []string{ok1.RunID, failed.RunID})
	br.checkAxe("a session card with its runs")

	// a shell run appears without a reload, first
	code, body := b.do(t, "POST", "/v1/sessions/"+s.id+"/shell", s.agent, map[string]any{"command": "true"})
	if code != 200 {
		t.Fatalf("shell: %d %s", code, body)
	}
	br.waitJS("the shell run", `const card = document.querySelector('[data-session="' + arguments[0] + '"]');
		const first = card && card.querySelector('[aria-label^="Recent runs"] tr[data-key]');
		return !!first && first.querySelector('td[data-label="Kind"]').textContent === "shell" && first.querySelector('.badge').textContent === "ok"`, s.id)
}
