package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"

	v1 "github.com/pylayer/pylayer/oci/spec/v1"
	registrytest "github.com/pylayer/pylayer/test/registry"
)

// keyPassword encrypts the cosign keys the suites make with pylayer keygen.
const keyPassword = "e2e-key-password"

// The locks the registry suites publish, made once per run from the shared index.
var (
	locksOnce sync.Once
	locksErr  error
	lockPaths map[string]string // name -> lock file
	lockSpecs = map[string][]string{
		"office":     {"python-docx", "openpyxl", "xlsxwriter"},
		"office-pip": {"python-docx", "openpyxl", "xlsxwriter", "pip"},
		"wheel":      {"wheel"}, // one wheel no other lock has: its blob may be tampered with
	}
)

// locks returns the lock file of each name in lockSpecs.
func locks(t testing.TB) map[string]string {
	t.Helper()
	_, url := index(t)
	locksOnce.Do(func() {
		dir := filepath.Join(scratch, "registry-locks")
		if locksErr = os.MkdirAll(dir, 0o755); locksErr != nil {
			return
		}
		lockPaths = map[string]string{}
		for name, reqs := range lockSpecs {
			out := filepath.Join(dir, name+".lock.json")
			r := run(context.Background(), t, dir, lockArgs(url, out, reqs)...)
			if r.code != 0 {
				locksErr = fmt.Errorf("pylayer lock %v: exit %d\n%s", reqs, r.code, r.stderr)
				return
			}
			lockPaths[name] = out
		}
	})
	if locksErr != nil {
		t.Fatal(locksErr)
	}
	return lockPaths
}

// unusedPublicKey is a P-256 public key nothing is signed with: the hosts' default trust.
const unusedPublicKey = `-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEDhBu4Cg2ugyXPofv0WfOLiTd8wdy
nBd55wl+55wl0m4bzOnQ+zYM3rg+F0NBN5bG/UbglsI2i2/JO0IuTzAR5Q==
-----END PUBLIC KEY-----
`

// host is one machine as the suites see it: its own HOME, host cache and environment.
// pylayer runs with a cleared environment plus these variables.
type host struct {
	home, cache string
	env         []string
}

// newHost makes a host; env entries (KEY=VALUE) override the defaults.
func newHost(t testing.TB, env ...string) *host {
	t.Helper()
	home := sharedDir(t)
	h := &host{home: home, cache: filepath.Join(home, "cache")}
	// A host has a trust policy (doctor insists); pulls in the tests name their own with --trust.
	hostTrust := filepath.Join(home, "host-trust.pub")
	if err := os.WriteFile(hostTrust, []byte(unusedPublicKey), 0o644); err != nil {
		t.Fatal(err)
	}
	h.env = append([]string{
		"PYLAYER_TRUST=" + hostTrust,
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"TMPDIR=" + os.TempDir(),
		"PYLAYER_CACHE=" + h.cache,
		"COSIGN_PASSWORD=" + keyPassword,
		"DOCKER_CONFIG=" + filepath.Join(home, "no-docker-config"),
		// Nothing but 127.0.0.1 is reachable: a proxy that does not exist says so fast.
		"HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "NO_PROXY=127.0.0.1,localhost",
	}, env...)
	return h
}

// command is pylayer with args on this host, not started.
func (h *host) command(ctx context.Context, t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(ctx, pylayer(t), args...)
	cmd.Dir = h.home
	cmd.Env = h.env
	return cmd
}

// run runs pylayer with args on this host.
func (h *host) run(ctx context.Context, t testing.TB, args ...string) result {
	t.Helper()
	return runResult(t, h.command(ctx, t, args...), args)
}

// must runs pylayer and fails the test unless it exits 0; it returns stdout, trimmed.
func (h *host) must(ctx context.Context, t testing.TB, args ...string) string {
	t.Helper()
	r := h.run(ctx, t, args...)
	if r.code != 0 {
		t.Fatalf("pylayer %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return strings.TrimSpace(r.stdout)
}

// refuse runs pylayer, which must fail: it returns stderr.
func (h *host) refuse(ctx context.Context, t testing.TB, args ...string) string {
	t.Helper()
	r := h.run(ctx, t, args...)
	if r.code == 0 {
		t.Fatalf("pylayer %s succeeded, want a refusal\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.stdout, r.stderr)
	}
	if strings.TrimSpace(r.stdout) != "" {
		t.Errorf("pylayer %s failed but printed a result on stdout: %q", strings.Join(args, " "), r.stdout)
	}
	return r.stderr
}

// keygen makes a cosign key pair with pylayer keygen; it returns the key and .pub paths.
func (h *host) keygen(ctx context.Context, t testing.TB, name string) (priv, pub string) {
	t.Helper()
	prefix := filepath.Join(h.home, name)
	h.must(ctx, t, "keygen", "--output-key-prefix", prefix)
	return prefix + ".key", prefix + ".pub"
}

// published is the --json output of pylayer publish.
type published struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
	Tag    string `json:"tag"`
	Pushed bool   `json:"pushed"`
	Stats  struct {
		Blobs         int   `json:"blobs"`
		Uploaded      int   `json:"uploaded"`
		Skipped       int   `json:"skipped"`
		BytesUploaded int64 `json:"bytes_uploaded"`
	} `json:"stats"`
}

// publish publishes lock to repo signed with priv; extra are more flags (e.g. --ca-file).
func (h *host) publish(ctx context.Context, t testing.TB, lock, repo, priv string, extra ...string) published {
	t.Helper()
	_, url := index(t)
	args := append([]string{"publish", lock, "--repo", repo, "--key", priv, "--index-url", url, "--json"}, extra...)
	var p published
	if err := json.Unmarshal([]byte(h.must(ctx, t, args...)), &p); err != nil {
		t.Fatalf("pylayer publish --json: %v", err)
	}
	if !strings.HasPrefix(p.Digest, "sha256:") || p.Ref != repo+"@"+p.Digest {
		t.Fatalf("pylayer publish printed ref %q digest %q for repo %s", p.Ref, p.Digest, repo)
	}
	return p
}

// pulled is the --json output of pylayer pull.
type pulled struct {
	Root     string `json:"root"`
	Digest   string `json:"digest"`
	Ref      string `json:"ref"`
	Verified bool   `json:"verified"`
}

func (h *host) pull(ctx context.Context, t testing.TB, ref string, extra ...string) pulled {
	t.Helper()
	var p pulled
	out := h.must(ctx, t, append([]string{"pull", ref, "--json"}, extra...)...)
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("pylayer pull --json printed %q: %v", out, err)
	}
	if want := filepath.Join(h.cache, "layers", "sha256", strings.TrimPrefix(p.Digest, "sha256:")); p.Root != want {
		t.Fatalf("pull printed root %s, want %s", p.Root, want)
	}
	return p
}

// cacheEntries lists the names under <cache>/<kind>/sha256 (kind: trees or layers).
func cacheEntries(t testing.TB, cache, kind string) []string {
	t.Helper()
	des, err := os.ReadDir(filepath.Join(cache, kind, "sha256"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// assertWrittenOnce fails unless the layer at root, pulled into a cache that held none of
// its blobs, holds each file under one name (each blob's tree renamed into it whole, no
// second link), and each blob's tree in the cache is a link to that layer, its home.
func assertWrittenOnce(t testing.TB, cache, root string, blobs []v1.Descriptor) {
	t.Helper()
	files := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if n := fi.Sys().(*syscall.Stat_t).Nlink; n != 1 {
			t.Errorf("%s has %d names, want 1", p, n)
		}
		files++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "../../layers/sha256/" + filepath.Base(root)
	for _, b := range blobs {
		if got, err := os.Readlink(filepath.Join(cache, "trees", "sha256", b.Digest.Encoded())); err != nil || got != want {
			t.Errorf("tree of %s: link %q, %v; want %q", b.Digest, got, err, want)
		}
	}
	if files < 100 {
		t.Errorf("the layer root has %d files; the office set has far more", files)
	}
}

// assertNothingUnpacked fails unless the cache has no tree and no layer.
func assertNothingUnpacked(t testing.TB, cache string) {
	t.Helper()
	for _, kind := range []string{"trees", "layers"} {
		if e := cacheEntries(t, cache, kind); len(e) > 0 {
			t.Errorf("a refused pull left %d entries in %s/%s/sha256: %v", len(e), cache, kind, e)
		}
	}
}

// snapshot describes a tree: relative path -> mode, plus sha256 of regular files and the
// target of symlinks.
func snapshot(t testing.TB, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		desc := fi.Mode().String()
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(sum[:])
		case fi.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " -> " + l
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatalf("reading tree %s: %v", root, err)
	}
	return out
}

// diffSnapshots reports up to 10 differences between two snapshots.
func diffSnapshots(a, b map[string]string) []string {
	var diffs []string
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	var sorted []string
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		if a[k] != b[k] {
			diffs = append(diffs, fmt.Sprintf("%s: %q vs %q", k, a[k], b[k]))
			if len(diffs) == 10 {
				break
			}
		}
	}
	return diffs
}

// tool runs a stock CLI (cosign, crane) against the registry r (nil: none) with a private HOME and no
// way out but to 127.0.0.1, so that a TUF or Rekor fetch fails fast instead of hanging.
func tool(ctx context.Context, t testing.TB, r *registrytest.Registry, name string, args ...string) (string, error) {
	t.Helper()
	home := sharedDir(t)
	cmd := exec.CommandContext(ctx, registrytest.Tool(t, name), args...)
	cmd.Env = []string{
		"HOME=" + home,
		"PATH=/usr/bin:/bin",
		"COSIGN_PASSWORD=" + keyPassword,
		"TUF_ROOT=" + filepath.Join(home, "tuf"),
		"HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9", "NO_PROXY=127.0.0.1,localhost",
	}
	if r != nil {
		cmd.Env = append(cmd.Env, r.Env()...)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// mustTool runs a stock CLI and fails the test unless it exits 0.
func mustTool(ctx context.Context, t testing.TB, r *registrytest.Registry, name string, args ...string) string {
	t.Helper()
	out, err := tool(ctx, t, r, name, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return out
}

// registryManifest reads a manifest straight from the registry (not through pylayer).
func registryManifest(ctx context.Context, t testing.TB, r *registrytest.Registry, repo, reference string) v1.Manifest {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.Scheme()+"://"+r.Host+"/v2/"+repo+"/manifests/"+reference, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", v1.MediaTypeImageManifest)
	req.SetBasicAuth(r.User, r.Password)
	tr := r.Transport()
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET manifest %s@%s: %s %v\n%s", repo, reference, resp.Status, err, b)
	}
	var m v1.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// importCheck imports the office set from a layer root with Debian's python3.11.
func importCheck(ctx context.Context, t testing.TB, root string) {
	t.Helper()
	sp := filepath.Join(root, "site-packages")
	cmd := exec.CommandContext(ctx, "/usr/bin/python3.11", "-c",
		"import sys, docx, openpyxl, xlsxwriter, lxml.etree; "+
			"assert docx.__file__.startswith(sys.argv[1]), docx.__file__", sp)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + sharedDir(t), "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=" + sp}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("importing the office set from %s: %v\n%s", root, err, out)
	}
}
