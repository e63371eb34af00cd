package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A minimal W3C WebDriver client for Debian's chromedriver driving headless chromium:
// the standard library only, no browser automation dependency.

const webElementKey = "element-6066-11e4-a52e-4f735466cecf"

// webEnsureChromium finds chromedriver on $PATH and the chromium it drives. The test never
// installs them: `make deps` does (Debian's chromium and chromium-driver).
func webEnsureChromium(t testing.TB) (chromium, driver string) {
	t.Helper()
	driver, err := exec.LookPath("chromedriver")
	if err != nil {
		t.Fatalf("chromedriver is not on $PATH (%v): run `make deps`, which installs Debian's chromium and chromium-driver", err)
	}
	chromium = "/usr/lib/chromium/chromium" // the binary behind Debian's /usr/bin/chromium wrapper
	if _, err := os.Stat(chromium); err != nil {
		if chromium, err = exec.LookPath("chromium"); err != nil {
			t.Fatalf("chromium is not installed (%v): run `make deps`", err)
		}
	}
	return chromium, driver
}

// webAxePath is where `make deps` puts axe-core:
// ${PYLAYER_TOOLS:-~/.cache/pylayer/tools}/axe-core/node_modules/axe-core/axe.min.js.
func webAxePath() (string, error) {
	tools := os.Getenv("PYLAYER_TOOLS")
	if tools == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no $PYLAYER_TOOLS and no home directory: %w", err)
		}
		tools = filepath.Join(home, ".cache", "pylayer", "tools")
	}
	return filepath.Join(tools, "axe-core", "node_modules", "axe-core", "axe.min.js"), nil
}

// webAxe returns axe-core's axe.min.js as `make deps` installed it; the test never fetches it.
func webAxe(t testing.TB) []byte {
	t.Helper()
	path, err := webAxePath()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("axe-core is missing (%v): run `make deps`, which installs it with npm install --prefix %s axe-core@4",
			err, filepath.Dir(filepath.Dir(filepath.Dir(path))))
	}
	return b
}

// webBrowser is one chromedriver process with one session.
type webBrowser struct {
	t      testing.TB
	base   string // chromedriver URL + /session/<id>
	shots  string // screenshot directory
	mirror string // a second copy of each screenshot, for people to look at
	axe    []byte
}

// webStart starts chromedriver and a headless chromium with a fresh profile.
func webStart(t testing.TB, shots string) *webBrowser {
	t.Helper()
	chromium, driver := webEnsureChromium(t)
	axe := webAxe(t) // before anything starts: a missing tool fails at once
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	logf := filepath.Join(t.TempDir(), "chromedriver.log")
	cmd := exec.Command(driver, fmt.Sprintf("--port=%d", port), "--log-path="+logf)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting chromedriver: %v", err)
	}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // chromedriver and the browsers it started
		cmd.Wait()
	})
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(url + "/status")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logf)
			t.Fatalf("chromedriver did not answer: %v\n%s", err, log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	b := &webBrowser{t: t, base: url, shots: shots, mirror: "/tmp/pylayer-screens", axe: axe}
	profile := t.TempDir()
	caps := map[string]any{"capabilities": map[string]any{"alwaysMatch": map[string]any{
		"browserName": "chrome",
		"goog:chromeOptions": map[string]any{"binary": chromium, "args": []string{
			"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--disable-dev-shm-usage", "--user-data-dir=" + profile, "--window-size=1280,900",
		}},
	}}}
	var sess struct {
		SessionID string `json:"sessionId"`
	}
	b.call("POST", "/session", caps, &sess)
	if sess.SessionID == "" {
		t.Fatal("chromedriver made no session")
	}
	b.base = url + "/session/" + sess.SessionID
	b.call("POST", "/timeouts", map[string]int{"script": 30000, "pageLoad": 30000}, nil)
	if err := os.MkdirAll(b.mirror, 0o755); err != nil {
		t.Fatal(err)
	}
	old, _ := filepath.Glob(filepath.Join(b.mirror, "*.png")) // the last run's
	for _, f := range old {
		os.Remove(f)
	}
	return b
}

// webDriverError is a WebDriver error answer.
type webDriverError struct {
	Code    string `json:"error"`
	Message string `json:"message"`
}

func (e *webDriverError) Error() string { return e.Code + ": " + e.Message }

// try sends one WebDriver command; out receives the "value" member.
func (b *webBrowser) try(method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		j, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	var env struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &env); err != nil {
		return fmt.Errorf("%s %s: %s: %w", method, path, raw, err)
	}
	if resp.StatusCode != http.StatusOK {
		var we webDriverError
		json.Unmarshal(env.Value, &we)
		return &we
	}
	if out != nil {
		return json.Unmarshal(env.Value, out)
	}
	return nil
}

func (b *webBrowser) call(method, path string, in, out any) {
	b.t.Helper()
	if err := b.try(method, path, in, out); err != nil {
		b.t.Fatalf("webdriver %s %s: %v", method, path, err)
	}
}

func (b *webBrowser) open(url string) {
	b.t.Helper()
	b.call("POST", "/url", map[string]string{"url": url}, nil)
}

// js runs script (a function body; arguments[i] are args) and decodes its result into out.
func (b *webBrowser) js(out any, script string, args ...any) {
	b.t.Helper()
	if args == nil {
		args = []any{}
	}
	b.call("POST", "/execute/sync", map[string]any{"script": script, "args": args}, out)
}

// waitJS polls script until it returns true.
func (b *webBrowser) waitJS(what, script string, args ...any) {
	b.t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		var ok bool
		b.js(&ok, script, args...)
		if ok {
			return
		}
		if time.Now().After(deadline) {
			var text string
			b.js(&text, "return document.body.innerText")
			b.screenshot("timeout")
			b.t.Fatalf("waiting for %s: timed out; the page says:\n%s", what, text)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// element finds one element by CSS selector.
func (b *webBrowser) element(css string) (string, error) {
	var v map[string]string
	if err := b.try("POST", "/element", map[string]string{"using": "css selector", "value": css}, &v); err != nil {
		return "", err
	}
	if v[webElementKey] == "" {
		return "", fmt.Errorf("find %s answered %v", css, v)
	}
	return v[webElementKey], nil
}

// retry runs fn on the element css selects until it succeeds: the page re-renders when the
// broker reports a change, so an element can go stale between finding and using it.
func (b *webBrowser) retry(css string, fn func(id string) error) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		id, err := b.element(css)
		if err == nil {
			if err = fn(id); err == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			b.screenshot("timeout")
			b.t.Fatalf("element %s: %v", css, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// click clicks the element css selects, like a user.
func (b *webBrowser) click(css string) {
	b.t.Helper()
	b.retry(css, func(id string) error { return b.try("POST", "/element/"+id+"/click", map[string]any{}, nil) })
}

// typeInto clears the element and types text into it (for a file input: the file's path).
func (b *webBrowser) typeInto(css, text string, clear bool) {
	b.t.Helper()
	b.retry(css, func(id string) error {
		if clear {
			if err := b.try("POST", "/element/"+id+"/clear", map[string]any{}, nil); err != nil {
				return err
			}
		}
		return b.try("POST", "/element/"+id+"/value", map[string]string{"text": text}, nil)
	})
}

// key presses one key (a WebDriver key code such as "\uE004" for Tab).
func (b *webBrowser) key(k string) {
	b.t.Helper()
	b.call("POST", "/actions", map[string]any{"actions": []any{map[string]any{
		"type": "key", "id": "keyboard", "actions": []any{
			map[string]string{"type": "keyDown", "value": k}, map[string]string{"type": "keyUp", "value": k}},
	}}}, nil)
	b.call("DELETE", "/actions", nil, nil)
}

// viewport emulates a device width (375: a phone, 1280: a desktop) through chromedriver's
// DevTools passthrough, so the page's layout width is exact.
func (b *webBrowser) viewport(width, height int) {
	b.t.Helper()
	b.call("POST", "/goog/cdp/execute", map[string]any{"cmd": "Emulation.setDeviceMetricsOverride",
		"params": map[string]any{"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600}}, nil)
	var w int
	b.js(&w, "return window.innerWidth")
	if w != width {
		b.t.Fatalf("viewport width %d, want %d", w, width)
	}
}

// screenshot saves a full-page PNG as <name>.png in the screenshot directory and its mirror.
func (b *webBrowser) screenshot(name string) {
	b.t.Helper()
	var h int
	b.js(&h, "return Math.ceil(document.documentElement.scrollHeight)")
	var w int
	b.js(&w, "return window.innerWidth")
	// Capture the whole page: grow the emulated height to the document's, then restore.
	b.call("POST", "/goog/cdp/execute", map[string]any{"cmd": "Emulation.setDeviceMetricsOverride",
		"params": map[string]any{"width": w, "height": max(h, 600), "deviceScaleFactor": 1, "mobile": w < 600}}, nil)
	var s string
	err := b.try("GET", "/screenshot", nil, &s)
	b.call("POST", "/goog/cdp/execute", map[string]any{"cmd": "Emulation.setDeviceMetricsOverride",
		"params": map[string]any{"width": w, "height": 900, "deviceScaleFactor": 1, "mobile": w < 600}}, nil)
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	png, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	for _, dir := range []string{b.shots, b.mirror} {
		if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
			b.t.Errorf("screenshot %s: %v", name, err)
		}
	}
}

// axeViolation is one rule axe-core found violated.
type axeViolation struct {
	ID     string `json:"id"`
	Impact string `json:"impact"`
	Help   string `json:"help"`
	Nodes  []struct {
		Target []any  `json:"target"`
		HTML   string `json:"html"`
	} `json:"nodes"`
}

// checkAxe runs axe-core on the page as it is and fails on serious or critical violations.
func (b *webBrowser) checkAxe(what string) {
	b.t.Helper()
	var loaded bool
	b.js(&loaded, "return typeof window.axe === 'object'")
	if !loaded {
		b.js(nil, string(b.axe)+"\n;return true")
	}
	var res struct {
		Violations []axeViolation `json:"violations"`
		Err        string         `json:"err"`
	}
	b.call("POST", "/execute/async", map[string]any{"script": `const done = arguments[arguments.length - 1];
		axe.run(document, {resultTypes: ["violations"]}).then((r) => done({violations: r.violations}), (e) => done({err: String(e)}));`,
		"args": []any{}}, &res)
	if res.Err != "" {
		b.t.Fatalf("axe.run on %s: %s", what, res.Err)
	}
	for _, v := range res.Violations {
		var where []string
		for _, n := range v.Nodes {
			where = append(where, fmt.Sprint(n.Target))
		}
		msg := fmt.Sprintf("axe on %s: %s (%s): %s at %s", what, v.ID, v.Impact, v.Help, strings.Join(where, " "))
		if v.Impact == "serious" || v.Impact == "critical" {
			b.t.Error(msg)
		} else {
			b.t.Log(msg)
		}
	}
}
