package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker/client"
	"github.com/pylayer/pylayer/test/fixture"
)

// webCatalog: the base is pin; foo is allowlisted; everything else waits for an approver.
const webCatalog = `{"base": ["pin"], "allow": [{"name": "foo"}]}`

// webXSS is a deny reason that would run script if the page ever rendered data as HTML.
const webXSS = `<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script> not today`

// webShortJS defines webShort(root, digest) for the page's scripts: true when root shows
// the digest short (its 12 first hex characters) with the full value as title and data-full.
const webShortJS = `const webShort = (root, full) => !!root && [...root.querySelectorAll("[data-full]")].some((c) =>
	c.dataset.full === full && c.title === full && c.textContent === full.replace(/^sha256:/, "").slice(0, 12));
`

// webStartServer starts cmd, returns the first line it prints (its URL) and stops it with
// SIGTERM when the test ends, logging its stderr if the test failed.
func webStartServer(t testing.TB, cmd *exec.Cmd) string {
	t.Helper()
	stderr := &syncBuf{}
	cmd.Stderr = stderr
	t.Cleanup(func() { // runs after the stop startServer registers
		if t.Failed() {
			t.Logf("%s stderr:\n%s", filepath.Base(cmd.Args[0])+" "+cmd.Args[1], stderr)
		}
	})
	_, url := startServer(t, cmd, 15*time.Second)
	return url
}

// TestWebApprover drives the approver page in headless chromium against a real pylayer
// serve (an OCI layout repository, a local index, real builds and signatures): an agent's
// request appears without a reload, the owner approves it and sees the build finish and the
// binding; a deny with a hostile reason; an uploaded wheel; a rebase; CSRF; keyboard, phone
// and desktop widths, and axe-core on every view.
func TestWebApprover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	shots := os.Getenv("PYLAYER_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	} else if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshots: %s (copies in /tmp/pylayer-screens)", shots)

	// A deployment: index, signing key, base pin 1.0 tagged current, catalog, tokens.
	h := newHost(t)
	repo := "oci:" + filepath.Join(h.home, "layout")
	priv, _ := h.keygen(ctx, t, "cosign")
	idx := t.TempDir()
	for _, w := range []fixture.Wheel{{Name: "pin", Version: "1.0"}, {Name: "foo", Version: "1.0"},
		{Name: "offlist", Version: "1.0"}, {Name: "offlist2", Version: "1.0"}} {
		if _, err := w.Write(idx); err != nil {
			t.Fatal(err)
		}
	}
	idxURL := webStartServer(t, exec.Command(pylayer(t), "index", "serve", idx, "--listen", "127.0.0.1:0"))
	publishBase := func(name string) string {
		lockPath := filepath.Join(h.home, name+".lock.json")
		h.must(ctx, t, lockArgs(idxURL, lockPath, []string{"pin"})...)
		var p published
		out := h.must(ctx, t, "publish", lockPath, "--repo", repo, "--key", priv, "--index-url", idxURL, "--tag", "current", "--json")
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatal(err)
		}
		return p.Digest
	}
	base1 := publishBase("base1")
	catalogPath := filepath.Join(h.home, "catalog.json")
	if err := os.WriteFile(catalogPath, []byte(webCatalog), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(h.home, "broker", "broker.db")
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		t.Fatal(err)
	}
	owner := h.must(ctx, t, "token", "create", "--db", db, "--role", "owner", "--subject", "alice")
	admin := h.must(ctx, t, "token", "create", "--db", db, "--role", "admin", "--subject", "root")
	url := webStartServer(t, h.command(context.Background(), t, "serve", "--listen", "127.0.0.1:0", "--db", db,
		"--catalog", catalogPath, "--repo", repo, "--key", priv, "--index-url", idxURL))

	api := func(token string) *client.Client { // the broker's API, as an agent or a script calls it
		c, err := client.New(url, token)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	cs := ok(api(owner).CreateSession(ctx, client.NewSession{}))(t)
	ses, agentToken := cs.Session.ID, cs.AgentToken
	agent := api(agentToken)
	if cs.Session.Base != base1 {
		t.Fatalf("new session's base %s, want the current one %s", cs.Session.Base, base1)
	}

	b := webStart(t, shots)
	b.viewport(1280, 900)

	// Sign in. The token never shows up in the URL or in the page's storage.
	b.open(url + "/")
	b.waitJS("the sign-in form", `return !document.getElementById("login").hidden`)
	b.screenshot("01-sign-in")
	b.checkAxe("the sign-in page")
	b.typeInto("#token", "pyl_wrong", true)
	b.click(`#login-form button[type=submit]`)
	b.waitJS("a sign-in error", `return document.getElementById("login-error").textContent.includes("failed")`)
	b.typeInto("#token", owner, true)
	b.click(`#login-form button[type=submit]`)
	b.waitJS("the signed-in page", `return !document.getElementById("app").hidden && document.getElementById("who").textContent.includes("alice")`)
	var leak bool
	b.js(&leak, `const t = arguments[0]; return location.href.includes(t) || document.cookie.includes(t) ||
		JSON.stringify(localStorage).includes(t) || JSON.stringify(sessionStorage).includes(t) || document.cookie.includes("pylayer_ui")`, owner)
	if leak {
		t.Error("the token (or the HttpOnly session cookie) is visible to the page's script or URL")
	}

	// An agent's request appears without a reload; the owner approves it; the build finishes
	// and the binding shows.
	r1 := ok(agent.Ask(ctx, ses, "offlist==1.0"))(t)
	if r1.State != "pending" {
		t.Fatalf("offlist: %+v, want pending", r1)
	}
	card := `[data-request="` + r1.ID + `"]`
	b.waitJS("the pending request", `const c = document.querySelector(arguments[0]);
		return !!c && c.closest("#pending") !== null && c.textContent.includes("offlist") && c.textContent.includes("not on the allowlist")`, card)
	b.screenshot("02-requests-pending")
	b.checkAxe("requests with one pending")
	b.click(card + ` button.approve`)
	b.waitJS("the build to finish", `const c = document.querySelector(arguments[0]); return !!c && c.querySelector(".badge").textContent === "bound"`, card)
	r1 = ok(agent.Request(ctx, r1.ID))(t)
	if r1.State != "bound" || r1.Approver != "alice" || !strings.HasPrefix(r1.Digest, "sha256:") {
		t.Fatalf("approved request: %+v", r1)
	}
	b.screenshot("03-requests-bound")
	b.click(`[data-view="sessions"]`)
	b.waitJS("the binding", webShortJS+`const s = document.querySelector(arguments[0]);
		return !!s && s.textContent.includes("offlist 1.0") && webShort(s, arguments[1])`,
		`[data-session="`+ses+`"]`, r1.Digest)
	b.screenshot("04-sessions-bound")
	b.checkAxe("sessions")

	// An open <details> stays open (the same element) while the sessions list refreshes: a
	// second session appears.
	b.click(`[data-session="` + ses + `"] details summary`)
	b.waitJS("the base packages open", `const d = document.querySelector(arguments[0]); window.__details = d; return !!d && d.open`,
		`[data-session="`+ses+`"] details`)
	cs2 := ok(api(owner).CreateSession(ctx, client.NewSession{}))(t)
	b.waitJS("the second session", `return !!document.querySelector(arguments[0])`, `#sessions [data-session="`+cs2.Session.ID+`"]`)
	var kept struct{ Same, Open bool }
	b.js(&kept, `const d = document.querySelector(arguments[0]); return {Same: d === window.__details, Open: !!d && d.open}`,
		`[data-session="`+ses+`"] details`)
	if !kept.Same || !kept.Open {
		t.Errorf("after a refresh the base packages <details> is the same element: %v, open: %v; want both", kept.Same, kept.Open)
	}

	// Deny, with a reason that is HTML: shown as text, never run.
	r2 := ok(agent.Ask(ctx, ses, "offlist2"))(t)
	b.click(`[data-view="requests"]`)
	card2 := `[data-request="` + r2.ID + `"]`
	b.waitJS("the second request", `return !!document.querySelector(arguments[0])`, card2)
	b.click(card2 + ` button.danger`) // without a reason: the page asks for one
	b.waitJS("the reason prompt", `return document.getElementById("error").textContent.includes("reason")`)

	// Half the reason typed, part of it selected, the page scrolled down: a refresh (a third
	// request arrives) keeps the same input focused, its text and selection, and the scroll.
	reason := `#deny-reason-` + r2.ID
	half := len(webXSS) / 2
	b.typeInto(reason, webXSS[:half], true)
	b.viewport(1280, 480) // short, so that the page scrolls
	var before struct{ Y float64 }
	b.js(&before, `const i = document.querySelector(arguments[0]); window.__reason = i;
		i.focus(); i.setSelectionRange(2, 7); i.scrollIntoView({block: "start"});
		return {Y: window.scrollY}`, reason)
	if before.Y <= 0 {
		t.Fatalf("the page did not scroll down to the deny reason (scrollY %v)", before.Y)
	}
	r3 := ok(agent.Ask(ctx, ses, "offlist2==1.0"))(t)
	b.waitJS("the third request", `return !!document.querySelector(arguments[0])`, `#pending [data-request="`+r3.ID+`"]`)
	var after struct {
		Same, Focused bool
		Value         string
		Start, End    int
		Y             float64
	}
	b.js(&after, `const i = window.__reason;
		return {Same: document.querySelector(arguments[0]) === i, Focused: document.activeElement === i,
			Value: i.value, Start: i.selectionStart, End: i.selectionEnd, Y: window.scrollY}`, reason)
	if !after.Same || !after.Focused || after.Value != webXSS[:half] || after.Start != 2 || after.End != 7 || after.Y != before.Y {
		t.Errorf("after a refresh: same input %v, focused %v, value %q, selection %d-%d, scrollY %v; want true, true, %q, 2-7, %v",
			after.Same, after.Focused, after.Value, after.Start, after.End, after.Y, webXSS[:half], before.Y)
	}
	b.screenshot("05-requests-typing")
	b.viewport(1280, 900)
	b.js(nil, `const i = document.querySelector(arguments[0]); i.setSelectionRange(i.value.length, i.value.length)`, reason)
	b.typeInto(reason, webXSS[half:], false)
	b.click(card2 + ` button.danger`)
	b.waitJS("the denial", `const c = document.querySelector(arguments[0]);
		return !!c && c.querySelector(".badge").textContent === "denied" && c.textContent.includes(arguments[1])`, card2, webXSS)
	var pwned bool
	b.js(&pwned, `return window.__pwned === 1 || document.querySelector("main img, main script") !== null`)
	if pwned {
		t.Fatal("a deny reason was rendered as HTML")
	}
	r2 = ok(agent.Request(ctx, r2.ID))(t)
	if r2.State != "denied" || !strings.Contains(strings.Join(r2.Reasons, " "), webXSS) {
		t.Fatalf("denied request as the agent sees it: %+v", r2)
	}
	b.screenshot("05-requests-denied")
	ok(api(owner).Deny(ctx, r3.ID, "asked twice"))(t)

	// CSRF: the page's own script cannot change anything without the header.
	var csrf struct{ NoHeader, WrongHeader int }
	b.call("POST", "/execute/async", map[string]any{"script": `const done = arguments[arguments.length - 1];
		const post = (h) => fetch("/v1/requests/" + arguments[0] + "/approve", {method: "POST", credentials: "same-origin",
			headers: Object.assign({"Content-Type": "application/json"}, h), body: "{}"}).then((r) => r.status);
		Promise.all([post({}), post({"X-CSRF-Token": "forged"})]).then(([a, b]) => done({NoHeader: a, WrongHeader: b}));`,
		"args": []any{r2.ID}}, &csrf)
	if csrf.NoHeader != 403 || csrf.WrongHeader != 403 {
		t.Errorf("cookie POST without/with a wrong CSRF header: %d/%d, want 403/403", csrf.NoHeader, csrf.WrongHeader)
	}

	// Upload a wheel for the session: it waits for approval like any request.
	whl, err := (fixture.Wheel{Name: "uploaded", Version: "1.0"}).Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b.click(`[data-view="sessions"]`)
	b.typeInto(`#upload-`+ses, whl, false)
	b.click(`[data-session="` + ses + `"] .upload button`)
	b.waitJS("the uploaded request", `return document.getElementById("status").textContent.includes("Uploaded uploaded-1.0")`)
	b.click(`[data-view="requests"]`)
	b.waitJS("the upload pending", `return [...document.querySelectorAll("#pending [data-request]")].some((c) => c.textContent.includes("Uploaded wheel uploaded-1.0"))`)
	b.screenshot("06-upload-pending")
	b.click(`#pending [data-request] button.approve`)
	b.waitJS("the upload bound", `return [...document.querySelectorAll("#recent [data-request]")].some((c) =>
		c.textContent.includes("uploaded-1.0") && c.querySelector(".badge").textContent === "bound")`)

	// Rebase: a new base becomes current; the page moves the session onto it.
	if _, err := (fixture.Wheel{Name: "pin", Version: "2.0"}).Write(idx); err != nil {
		t.Fatal(err)
	}
	base2 := publishBase("base2")
	if base2 == base1 {
		t.Fatal("the second base has the first one's digest")
	}
	b.click(`[data-view="sessions"]`)
	b.click(`[data-session="` + ses + `"] .actions button:not(.secondary)`)
	b.waitJS("the rebased session", webShortJS+`const s = document.querySelector(arguments[0]);
		return !!s && webShort(s.querySelector('[data-field="base"]'), arguments[1])`, `[data-session="`+ses+`"]`, base2)
	b.screenshot("07-sessions-rebased")

	// Layers: what the broker's host holds and what sessions are bound to. Audit, filtered by session.
	b.click(`[data-view="layers"]`)
	b.waitJS("the layers view", webShortJS+`return webShort(document.getElementById("layers"), arguments[0]) &&
		webShort(document.getElementById("bound"), arguments[0])`, base2)
	b.screenshot("08-layers")
	b.checkAxe("layers")

	// Copying a short digest, or a row holding one, copies the full values.
	var cp struct{ One, Row, Ref string }
	b.js(&cp, `const c = document.querySelector("#layers code.digest[data-full='" + arguments[0] + "']");
		const tr = c.closest("tr"), sel = getSelection(), r = document.createRange();
		const copy = (range) => { sel.removeAllRanges(); sel.addRange(range); const dt = new DataTransfer();
			c.dispatchEvent(new ClipboardEvent("copy", {clipboardData: dt, bubbles: true, cancelable: true})); return dt.getData("text/plain"); };
		r.setStart(c.firstChild, 2); r.setEnd(c.firstChild, 6);
		const one = copy(r);
		const whole = document.createRange(); whole.selectNodeContents(tr);
		const row = copy(whole);
		sel.removeAllRanges();
		const ref = tr.querySelector("code.ref");
		return {One: one, Row: row, Ref: ref ? ref.dataset.full : ""}`, base2)
	if cp.One != base2 {
		t.Errorf("copying part of a short digest put %q on the clipboard, want %s", cp.One, base2)
	}
	if !strings.Contains(cp.Row, base2) || cp.Ref == "" || !strings.Contains(cp.Row, cp.Ref) {
		t.Errorf("copying the layer's row put %q on the clipboard, want the full digest %s and reference %q in it", cp.Row, base2, cp.Ref)
	}
	b.click(`[data-view="audit"]`)
	b.js(nil, `const s = document.getElementById("audit-session"); s.value = arguments[0]; s.dispatchEvent(new Event("change"))`, ses)
	b.waitJS("the session's audit log", `const a = document.getElementById("audit").textContent;
		return a.includes("request.denied") && a.includes("session.rebase") && !a.includes("ui.login")`)
	b.screenshot("09-audit")
	b.checkAxe("audit")

	// Desktop width: every table header is one line (never "Ki nd"), every table fits
	// without scrolling, the page never scrolls sideways.
	for _, v := range []string{"requests", "sessions", "layers", "audit"} {
		b.click(`[data-view="` + v + `"]`)
		b.waitJS("the "+v+" view", `return !document.getElementById("view-" + arguments[0]).hidden`, v)
		var lay struct {
			Headers int
			Bad     []string
			Over    bool
		}
		b.js(&lay, `const view = document.getElementById("view-" + arguments[0]), bad = [];
			const ths = [...view.querySelectorAll("th")];
			for (const th of ths) {
				const r = document.createRange(); r.selectNodeContents(th);
				const lines = new Set([...r.getClientRects()].map((q) => Math.round(q.top))).size;
				const s = getComputedStyle(th), line = parseFloat(s.lineHeight);
				const inner = th.clientHeight - parseFloat(s.paddingTop) - parseFloat(s.paddingBottom);
				if (lines !== 1 || !(inner < 1.5 * line)) bad.push(th.textContent + ": " + lines + " lines, " + inner + "px high for " + line + "px lines");
			}
			for (const w of view.querySelectorAll(".table-wrap")) {
				if (w.scrollWidth > w.clientWidth + 1) bad.push(w.getAttribute("aria-label") + ": " + w.scrollWidth + "px wide in " + w.clientWidth + "px");
			}
			return {Headers: ths.length, Bad: bad, Over: document.documentElement.scrollWidth > window.innerWidth + 1}`, v)
		if lay.Headers == 0 && (v == "layers" || v == "audit") {
			t.Errorf("the %s view at 1280px has no table headers to check", v)
		}
		for _, bad := range lay.Bad {
			t.Errorf("the %s view at 1280px: %s", v, bad)
		}
		if lay.Over {
			t.Errorf("the %s view scrolls sideways at 1280px", v)
		}
	}

	// Keyboard: Tab reaches every control of the view in order, each with a visible focus
	// ring, while the page refreshes under it (an agent request the policy rejects, every
	// few steps): focus stays on the same element through each refresh.
	rejected := 0
	refreshUnder := func(k int) {
		t.Helper()
		rejected++
		r := ok(agent.Ask(ctx, ses, fmt.Sprintf("nosuch%d", rejected)))(t)
		if r.State != "rejected" {
			t.Fatalf("a request for a package the index lacks: %+v, want rejected", r)
		}
		b.waitJS("the rejected request", `return !!document.querySelector(arguments[0])`, `#recent [data-request="`+r.ID+`"]`)
		var same bool
		b.js(&same, `return document.activeElement === window.__kbd[arguments[0]]`, k)
		if !same {
			t.Errorf("a refresh took the focus off control %d", k)
		}
	}
	b.click(`[data-view="requests"]`)
	b.js(nil, `document.activeElement.blur(); window.scrollTo(0, 0)`)
	var n int
	b.js(&n, `window.__kbd = [...document.querySelectorAll("button, input, select, a[href], [tabindex='0']")]
		.filter((e) => e.offsetParent !== null && !e.disabled); return window.__kbd.length`)
	reached := map[int]bool{}
	prev := -1
	for i := 0; i < n+10 && len(reached) < n; i++ {
		b.key("\uE004")
		var got struct {
			K       int
			Outline string
		}
		b.js(&got, `const e = document.activeElement; const s = getComputedStyle(e);
			return {K: window.__kbd.indexOf(e), Outline: s.outlineStyle + " " + s.outlineWidth}`)
		if got.K < 0 {
			continue // the document itself, between the last control and the first
		}
		if prev >= 0 && got.K != (prev+1)%n {
			t.Errorf("Tab went from control %d to %d, want %d", prev, got.K, (prev+1)%n)
		}
		prev = got.K
		reached[got.K] = true
		if strings.HasPrefix(got.Outline, "none") || strings.HasSuffix(got.Outline, " 0px") {
			t.Errorf("focus on control %d has no visible outline (%s)", got.K, got.Outline)
		}
		if len(reached)%4 == 1 {
			refreshUnder(got.K)
		}
	}
	if len(reached) != n {
		t.Errorf("Tab reached %d of %d controls", len(reached), n)
	}
	if rejected < 3 {
		t.Errorf("the page refreshed %d times during the Tab walk, want at least 3", rejected)
	}

	// A phone's width: no horizontal scrolling, not even inside a table (rows stack), every
	// view checked by axe again; a stacked table is still a table to assistive technology.
	b.viewport(375, 812)
	for _, v := range []string{"requests", "sessions", "layers", "audit"} {
		b.click(`[data-view="` + v + `"]`)
		b.waitJS("the "+v+" view", `return !document.getElementById("view-" + arguments[0]).hidden`, v)
		var over []string
		b.js(&over, `const o = [...document.querySelectorAll("#view-" + arguments[0] + " .table-wrap")]
			.filter((w) => w.scrollWidth > w.clientWidth + 1).map((w) => w.getAttribute("aria-label"));
			if (document.documentElement.scrollWidth > window.innerWidth + 1) o.push("the page");
			return o`, v)
		for _, o := range over {
			t.Errorf("the %s view at 375px: %s scrolls sideways", v, o)
		}
		if v == "audit" {
			for css, want := range map[string]string{"#audit table": "table", "#audit th": "columnheader", "#audit td": "cell"} {
				var role string
				b.retry(css, func(id string) error { return b.try("GET", "/element/"+id+"/computedrole", nil, &role) })
				if role != want {
					t.Errorf("at 375px %s has the role %q, want %q", css, role, want)
				}
			}
		}
		b.screenshot("10-phone-" + v) // 10-phone-layers: the layers at 375px (08-layers: at 1280px)
		b.checkAxe(v + " at 375px")
	}

	// An admin signs in too and collects the host cache; bound layers stay.
	b.viewport(1280, 900)
	b.click(`#logout`)
	b.waitJS("signed out", `return !document.getElementById("login").hidden`)
	b.typeInto("#token", admin, true)
	b.click(`#login-form button[type=submit]`)
	b.click(`[data-view="layers"]`)
	b.click(`#gc`)
	b.waitJS("the gc answer", `return document.getElementById("gc-result").textContent.startsWith("Removed ")`)
	b.screenshot("11-admin-gc")
}
