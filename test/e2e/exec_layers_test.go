package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestExecCuratedPNG: a warm session on the curated base (interpreter python-current, base
// current, as a broker hands them to new sessions) draws with matplotlib; the figure the
// cell shows comes back as an image/png output, and one it saves lands in the workspace;
// numpy's state is kept between calls.
func TestExecCuratedPNG(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	h := newHost(t)
	repo := "oci:" + filepath.Join(sharedDir(t), "repo")
	priv, pub := h.keygen(ctx, t, "ci")
	c := publishCurated(ctx, t, h, repo, priv, pub, []string{"--tag", "python-current"}, []string{"--tag", "current"})
	catalog := filepath.Join(h.home, "catalog.json")
	names, _ := json.Marshal(curatedRequirements)
	if err := os.WriteFile(catalog, []byte(`{"base": `+string(names)+`, "allow": []}`), 0o644); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(h.home, "broker", "broker.db")
	if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
		t.Fatal(err)
	}
	b := &exBroker{owner: h.must(ctx, t, "token", "create", "--db", db, "--role", "owner", "--subject", "alice"), stderr: &syncBuf{}}
	cmd := h.command(context.Background(), t, "serve", "--listen", "127.0.0.1:0", "--db", db, "--catalog", catalog,
		"--repo", repo, "--key", priv, "--index-url", c.url, "--trust", pub)
	cmd.Stderr = b.stderr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pylayer serve stderr:\n%s", b.stderr)
		}
	})
	_, b.url = startServer(t, cmd, 15*time.Second)
	s := b.session(t)

	r := b.exec(t, s, "import sys, numpy as np\nx = np.linspace(0, 6.28, 50)\nsys.prefix", 120)
	if r.Status != "ok" || len(r.Outputs) != 1 || r.Outputs[0].Data != "'/opt/python'" {
		t.Fatalf("first cell: %+v", r)
	}
	r = b.exec(t, s, `import matplotlib.pyplot as plt
fig, ax = plt.subplots(figsize=(3, 2))
ax.plot(x, np.sin(x))
fig.savefig("/workspace/saved.png", dpi=50)
plt.show()`, 120)
	if r.Status != "ok" || strings.TrimSpace(r.Stderr) != "" {
		t.Fatalf("the plotting cell: %+v", r)
	}
	pngs := 0
	for _, o := range r.Outputs {
		if o.MIME != "image/png" {
			continue
		}
		img, err := base64.StdEncoding.DecodeString(o.Data)
		if err != nil || !bytes.HasPrefix(img, []byte("\x89PNG\r\n\x1a\n")) || len(img) < 1000 {
			t.Errorf("an image/png output that is not a PNG (%d bytes, %v)", len(img), err)
		}
		pngs++
	}
	if pngs < 1 {
		t.Errorf("the cell showed a matplotlib figure; outputs have no image/png: %+v", r.Outputs)
	}
	st, body := b.do(t, "GET", "/v1/sessions/"+s.id+"/files/saved.png", s.agent, nil)
	if st != 200 || !bytes.HasPrefix(body, []byte("\x89PNG")) {
		t.Errorf("GET the saved figure: %d, %d bytes", st, len(body))
	}
}

// TestExecRebind: a warm session whose bindings change (an ext layer bound after a request)
// restarts its process on the next call, says so, and sees the new layer; what the old
// process held is gone, as a restart means.
func TestExecRebind(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d := newBkDeploy(ctx, t, false)
	d.serve.stop(10 * time.Second) // a serve that trusts the deployment's key runs the sessions
	args := []string{"serve", "--listen", "127.0.0.1:0", "--db", d.db, "--catalog", d.catalog,
		"--repo", d.repo, "--key", d.priv, "--index-url", d.proxy.URL, "--trust", d.pub}
	cmd := d.h.command(context.Background(), t, args...)
	b := &exBroker{owner: d.owner, stderr: &syncBuf{}}
	cmd.Stderr = b.stderr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pylayer serve stderr:\n%s", b.stderr)
		}
	})
	_, b.url = startServer(t, cmd, 15*time.Second)
	d.serve = &bkServe{URL: b.url}
	s := b.session(t)

	if r := b.exec(t, s, "import pin\nkept = 1\ntry:\n    import foo\nexcept ImportError as e:\n    print('no foo:', e.name)", 120); r.Status != "ok" || !strings.Contains(r.Stdout, "no foo: foo") {
		t.Fatalf("before the request: %+v", r)
	}
	req := d.serve.ask(t, bkSession{ID: s.id, Agent: s.agent}, "foo==1.0")
	if got := d.serve.wait(t, s.agent, req.ID); got.State != "bound" {
		t.Fatalf("the request for foo ended %s: %s", got.State, got.reasons())
	}
	r := b.exec(t, s, "import foo\nprint(foo.__file__)\nprint('kept' in globals())", 120)
	if r.Status != "ok" || !r.Restarted || !strings.Contains(r.RestartReason, "bindings changed") {
		t.Fatalf("after the binding: %+v, want a restart that says the bindings changed", r)
	}
	lines := strings.Fields(r.Stdout)
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "/opt/pylayer/layers/") || !strings.Contains(lines[0], "ext") || lines[1] != "False" {
		t.Errorf("after the restart: foo from %q, old state kept %q; want foo from the ext layer and a fresh process", r.Stdout, lines)
	}
	if r := b.exec(t, s, "print(foo.__name__)", 120); r.Status != "ok" || r.Restarted || strings.TrimSpace(r.Stdout) != "foo" {
		t.Errorf("the next call restarts again or lost foo: %+v", r)
	}
}
