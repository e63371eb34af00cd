package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pylayer/pylayer/broker/postgres/pgtest"
	"github.com/pylayer/pylayer/test/fixture"
)

// Shared state of one test binary run: a scratch root, the pylayer binary built once, one
// index directory with the whole corpus, served once by pylayer itself.
var (
	scratch string

	binOnce sync.Once
	binPath string
	binErr  error

	idxOnce sync.Once
	idxDir  string
	idxURL  string
	idxErr  error
	idxSrv  *child

	pyOnce sync.Once
	pyPath string
	pyErr  error
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: the end-to-end suite is the integration tier, not -short: `make test` runs it")
		os.Exit(0)
	}
	var err error
	scratch, err = os.MkdirTemp("", "pylayer-e2e-*")
	if err == nil {
		// The sandbox user of root's sessions must reach the interpreter prefix made here.
		err = os.Chmod(scratch, 0o755)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	code := pgtest.Main(m) // m.Run(), then stops the PostgreSQL that tests may have started
	if idxSrv != nil {
		idxSrv.stop(10 * time.Second)
	}
	os.RemoveAll(scratch)
	os.Exit(code)
}

// moduleRoot is the directory of the go.mod this test belongs to.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the pylayer module")
	}
	return filepath.Dir(gomod), nil
}

// pylayer builds ./cmd/pylayer once per run, the front end and the full binary, and
// returns the front end's path. With $PYLAYER_E2E_BIN set, the suites test that binary
// (with its pylayer-full beside it) instead of building them.
func pylayer(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		if p := os.Getenv("PYLAYER_E2E_BIN"); p != "" {
			if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				binErr = fmt.Errorf("$PYLAYER_E2E_BIN=%s is not an executable file (%v)", p, err)
			}
			binPath = p
			return
		}
		root, err := moduleRoot()
		if err != nil {
			binErr = err
			return
		}
		// As make build installs them (scripts/build.sh): the front end (run, exec, shell)
		// as pylayer, and the full binary beside it, to which the front end hands every
		// other command.
		binPath = filepath.Join(scratch, "pylayer")
		cmd := exec.Command("bash", "scripts/build.sh", scratch)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("bash scripts/build.sh %s: %v\n%s", scratch, err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// oracle returns the pip oracle interpreter (CPython 3.11, pip 23.2.1); missing is fatal.
func oracle(t testing.TB) string {
	t.Helper()
	pyOnce.Do(func() { pyPath, pyErr = fixture.ResolveInterpreter(context.Background(), fixture.OraclePython) })
	if pyErr != nil {
		t.Fatal(pyErr)
	}
	return pyPath
}

// debCache is where `make deps` keeps the .deb files the fixtures repack.
func debCache() string { return fixture.DebCache() }

// index writes the corpus, Debian's wheels and the repacked office set into one directory,
// serves it with `pylayer index serve DIR --listen 127.0.0.1:0` and returns the directory
// and the index URL the server printed (http://127.0.0.1:PORT/simple/).
func index(t testing.TB) (dir, url string) {
	t.Helper()
	bin := pylayer(t)
	idxOnce.Do(func() { idxDir, idxURL, idxErr = startIndex(bin) })
	if idxErr != nil {
		t.Fatal(idxErr)
	}
	return idxDir, idxURL
}

func startIndex(bin string) (string, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := filepath.Join(scratch, "index")
	if err := fixture.WriteCorpus(dir); err != nil {
		return "", "", err
	}
	if _, err := fixture.DebianWheels(ctx, dir); err != nil {
		return "", "", err
	}
	if _, err := fixture.RepackDebian(ctx, debCache(), dir); err != nil {
		return "", "", err
	}
	// TestMain stops the server; it dies with a test binary that does not get that far.
	cmd := exec.Command(bin, "index", "serve", dir, "--listen", "127.0.0.1:0")
	c, url, _, err := startChild(cmd)
	if err != nil {
		return "", "", err
	}
	idxSrv = c
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/simple/") {
		return "", "", fmt.Errorf("pylayer index serve printed %q, want http://127.0.0.1:PORT/simple/; stderr:\n%s", url, cmd.Stderr)
	}
	// It prints once it listens; one request proves it answers for a real project.
	resp, err := http.Get(url + "chain-a/")
	if err != nil {
		return "", "", fmt.Errorf("index at %s: %w", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("index at %s: GET chain-a/: %s", url, resp.Status)
	}
	return dir, url, nil
}

// result of one pylayer run.
type result struct {
	stdout, stderr string
	code           int
}

// run runs pylayer with args in dir, with a private cache.
func run(ctx context.Context, t testing.TB, dir string, args ...string) result {
	t.Helper()
	cmd := exec.CommandContext(ctx, pylayer(t), append([]string{"--cache", filepath.Join(scratch, "cache")}, args...)...)
	cmd.Dir = dir
	return runResult(t, cmd, args)
}

// lockJSON is the --json output of pylayer lock.
type lockJSON struct {
	Key      string `json:"key"`
	Lock     string `json:"lock"`
	Packages []struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"packages"`
}

// lockFile is the part of a lock file the suites read.
type lockFile struct {
	Version  int    `json:"version"`
	Kind     string `json:"kind"`
	Packages []struct {
		Name     string   `json:"name"`
		Version  string   `json:"version"`
		Filename string   `json:"filename"`
		URL      string   `json:"url"`
		SHA256   string   `json:"sha256"`
		Size     int64    `json:"size"`
		Required []string `json:"required_by"`
	} `json:"packages"`
}

// checkLock verifies a successful pylayer lock run: the key printed is the sha256 of the
// file written, the file's packages equal the printed ones, names are normalized, every
// package is pinned to a file of the index with the right hash and size. It returns the
// sorted "name==version" set.
func checkLock(t testing.TB, r result, path, indexDir string) []string {
	t.Helper()
	var out lockJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("pylayer lock --json printed %q: %v", r.stdout, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("lock file: %v", err)
	}
	// The key is the sha256 of the lock's content: the file without its package URLs
	// (provenance), byte for byte.
	var content []string
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), `"url": `) {
			content = append(content, line)
		}
	}
	sum := sha256.Sum256([]byte(strings.Join(content, "")))
	if out.Key != hex.EncodeToString(sum[:]) {
		t.Errorf("printed key %s is not the sha256 of the lock file without its URLs (%x)", out.Key, sum)
	}
	var lf lockFile
	if err := json.Unmarshal(data, &lf); err != nil {
		t.Fatalf("lock file is not JSON: %v", err)
	}
	printed := map[string]bool{}
	for _, p := range out.Packages {
		printed[p.Name+"=="+p.Version] = true
	}
	var set []string
	for _, p := range lf.Packages {
		nv := p.Name + "==" + p.Version
		set = append(set, nv)
		if !printed[nv] {
			t.Errorf("%s is in the lock file but not in the --json output", nv)
		}
		if p.Name != fixture.NormalizeName(p.Name) {
			t.Errorf("lock name %q is not normalized", p.Name)
		}
		f, err := os.ReadFile(filepath.Join(indexDir, p.Filename))
		if err != nil {
			t.Errorf("%s: locked file %q is not in the index: %v", nv, p.Filename, err)
			continue
		}
		fs := sha256.Sum256(f)
		if p.SHA256 != hex.EncodeToString(fs[:]) || p.Size != int64(len(f)) {
			t.Errorf("%s: lock says sha256 %s size %d, the file has %x size %d", nv, p.SHA256, p.Size, fs, len(f))
		}
		if !strings.HasSuffix(p.Filename, ".whl") {
			t.Errorf("%s: locked a non-wheel %s", nv, p.Filename)
		}
	}
	if len(set) != len(out.Packages) {
		t.Errorf("lock file has %d packages, --json printed %d", len(set), len(out.Packages))
	}
	return sortedCopy(set)
}
