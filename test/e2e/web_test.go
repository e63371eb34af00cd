package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/test/fixture"
)

// webCatalog: the base is pin; foo is allowlisted; everything else waits for an approver.
const webCatalog = `{"base": ["pin"], "allow": [{"name": "foo"}]}`

// webXSS is a deny reason that would run script if the page ever rendered data as HTML.
const webXSS = `<img src=x onerror="window.__pwned=1"><script>window.__pwned=1</script> not today`

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

// webAPI calls the broker with a bearer token, as an agent or a script would.
func webAPI(t testing.TB, method, url, token string, body any, want int, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, url, resp.StatusCode, b, want)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %s: %v", method, url, b, err)
		}
	}
}

type webReq struct {
	ID       string   `json:"id"`
	State    string   `json:"state"`
	Reasons  []string `json:"reasons"`
	Digest   string   `json:"digest"`
	Error    string   `json:"error"`
	Approver string   `json:"approver"`
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

	var cs struct {
		Session struct {
			ID   string `json:"id"`
			Base string `json:"base"`
		} `json:"session"`
		AgentToken string `json:"agent_token"`
	}
	webAPI(t, "POST", url+"/v1/sessions", owner, map[string]any{}, 201, &cs)
	ses, agent := cs.Session.ID, cs.AgentToken
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
	var r1 webReq
	webAPI(t, "POST", url+"/v1/sessions/"+ses+"/requests", agent, map[string]any{"packages": []string{"offlist==1.0"}}, 201, &r1)
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
	webAPI(t, "GET", url+"/v1/requests/"+r1.ID, agent, nil, 200, &r1)
	if r1.State != "bound" || r1.Approver != "alice" || !strings.HasPrefix(r1.Digest, "sha256:") {
		t.Fatalf("approved request: %+v", r1)
	}
	b.screenshot("03-requests-bound")
	b.click(`[data-view="sessions"]`)
	b.waitJS("the binding", `const s = document.querySelector(arguments[0]); return !!s && s.textContent.includes(arguments[1]) && s.textContent.includes("offlist 1.0")`,
		`[data-session="`+ses+`"]`, r1.Digest)
	b.screenshot("04-sessions-bound")
	b.checkAxe("sessions")

	// Deny, with a reason that is HTML: shown as text, never run.
	var r2 webReq
	webAPI(t, "POST", url+"/v1/sessions/"+ses+"/requests", agent, map[string]any{"packages": []string{"offlist2"}}, 201, &r2)
	b.click(`[data-view="requests"]`)
	card2 := `[data-request="` + r2.ID + `"]`
	b.waitJS("the second request", `return !!document.querySelector(arguments[0])`, card2)
	b.click(card2 + ` button.danger`) // without a reason: the page asks for one
	b.waitJS("the reason prompt", `return document.getElementById("error").textContent.includes("reason")`)
	b.typeInto(`#deny-reason-`+r2.ID, webXSS, true)
	b.click(card2 + ` button.danger`)
	b.waitJS("the denial", `const c = document.querySelector(arguments[0]);
		return !!c && c.querySelector(".badge").textContent === "denied" && c.textContent.includes(arguments[1])`, card2, webXSS)
	var pwned bool
	b.js(&pwned, `return window.__pwned === 1 || document.querySelector("main img, main script") !== null`)
	if pwned {
		t.Fatal("a deny reason was rendered as HTML")
	}
	webAPI(t, "GET", url+"/v1/requests/"+r2.ID, agent, nil, 200, &r2)
	if r2.State != "denied" || !strings.Contains(strings.Join(r2.Reasons, " "), webXSS) {
		t.Fatalf("denied request as the agent sees it: %+v", r2)
	}
	b.screenshot("05-requests-denied")

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
	b.waitJS("the rebased session", `const s = document.querySelector(arguments[0]);
		return !!s && s.querySelector('[data-field="base"]').textContent === arguments[1]`, `[data-session="`+ses+`"]`, base2)
	b.screenshot("07-sessions-rebased")

	// Layers: what the broker's host holds and what sessions are bound to. Audit, filtered by session.
	b.click(`[data-view="layers"]`)
	b.waitJS("the layers view", `return document.getElementById("layers").textContent.includes(arguments[0]) &&
		document.getElementById("bound").textContent.includes(arguments[0])`, base2)
	b.screenshot("08-layers")
	b.checkAxe("layers")
	b.click(`[data-view="audit"]`)
	b.js(nil, `const s = document.getElementById("audit-session"); s.value = arguments[0]; s.dispatchEvent(new Event("change"))`, ses)
	b.waitJS("the session's audit log", `const a = document.getElementById("audit").textContent;
		return a.includes("request.denied") && a.includes("session.rebase") && !a.includes("ui.login")`)
	b.screenshot("09-audit")
	b.checkAxe("audit")

	// Keyboard: Tab reaches every control of the view, each with a visible focus ring.
	b.click(`[data-view="requests"]`)
	b.js(nil, `document.activeElement.blur(); window.scrollTo(0, 0)`)
	var want []string
	b.js(&want, `return [...document.querySelectorAll("button, input, select, a[href], [tabindex='0']")]
		.filter((e) => e.offsetParent !== null && !e.disabled).map((e, i) => e.dataset.kbd = "k" + i)`)
	reached := map[string]bool{}
	for i := 0; i < len(want)+5 && len(reached) < len(want); i++ {
		b.key("\uE004")
		var got struct {
			K       string
			Outline string
		}
		b.js(&got, `const e = document.activeElement; const s = getComputedStyle(e);
			return {K: e.dataset.kbd || "", Outline: s.outlineStyle + " " + s.outlineWidth}`)
		if got.K != "" {
			reached[got.K] = true
			if strings.HasPrefix(got.Outline, "none") || strings.HasSuffix(got.Outline, " 0px") {
				t.Errorf("focus on control %s has no visible outline (%s)", got.K, got.Outline)
			}
		}
	}
	if len(reached) != len(want) {
		t.Errorf("Tab reached %d of %d controls", len(reached), len(want))
	}

	// A phone's width: no horizontal scrolling, every view checked by axe again.
	b.viewport(375, 812)
	for _, v := range []string{"requests", "sessions", "layers", "audit"} {
		b.click(`[data-view="` + v + `"]`)
		b.waitJS("the "+v+" view", `return !document.getElementById("view-" + arguments[0]).hidden`, v)
		var over bool
		b.js(&over, `return document.documentElement.scrollWidth > window.innerWidth + 1`)
		if over {
			t.Errorf("the %s view scrolls sideways at 375px", v)
		}
		b.screenshot("10-phone-" + v)
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
