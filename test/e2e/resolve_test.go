package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/test/fixture"
)

// target flags of every lock in these suites; PipResolve uses the same target.
var targetFlags = []string{"--python", "3.11", "--platform", "manylinux_2_28_x86_64"}

// sem bounds concurrent pylayer+pip pairs whatever -parallel says.
var sem = make(chan struct{}, 4)

func sortedCopy(s []string) []string {
	out := append([]string{}, s...)
	sort.Strings(out)
	return out
}

func lockArgs(url, out string, reqs []string, extra ...string) []string {
	args := append([]string{"lock"}, reqs...)
	args = append(args, "--index-url", url)
	args = append(args, targetFlags...)
	args = append(args, extra...)
	return append(args, "-o", out, "--json")
}

// TestResolveMatchesPip locks every corpus case with pylayer and asks pip for the same
// resolution; both must install the same name==version set or both must refuse.
func TestResolveMatchesPip(t *testing.T) {
	py := oracle(t)
	dir, url := index(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	// The group returns only when its parallel subtests are done, before cancel runs.
	t.Run("cases", func(t *testing.T) {
		for _, c := range fixture.Cases() {
			t.Run(c.Name, func(t *testing.T) {
				t.Parallel()
				sem <- struct{}{}
				defer func() { <-sem }()
				work := sharedDir(t)
				var extra []string
				if len(c.Constraints) > 0 {
					cf := filepath.Join(work, "constraints.txt")
					if err := os.WriteFile(cf, []byte(strings.Join(c.Constraints, "\n")+"\n"), 0o644); err != nil {
						t.Fatal(err)
					}
					extra = []string{"-c", cf}
				}
				out := filepath.Join(work, "lock.json")
				r := run(ctx, t, work, lockArgs(url, out, c.Reqs, extra...)...)

				pipSet, pipErr := fixture.PipResolve(ctx, py, url, work, c.Reqs, c.Constraints)
				if pipErr != nil && !errors.Is(pipErr, fixture.ErrPipFailed) {
					t.Fatalf("pip oracle broken: %v", pipErr)
				}
				// The corpus documents pip's answer; a mismatch means the oracle is misconfigured
				// or the index serves something else than the corpus says.
				if c.WantFail != (pipErr != nil) || (!c.WantFail && !reflect.DeepEqual(pipSet, sortedCopy(c.Want))) {
					t.Errorf("pip disagrees with the corpus: got %v (%v), documented %v fail=%v", pipSet, pipErr, c.Want, c.WantFail)
				}

				if pipErr != nil {
					if r.code != 1 {
						t.Fatalf("pip refuses %v but pylayer lock exited %d:\nstdout %s\nstderr %s\npip: %v", c.Reqs, r.code, r.stdout, r.stderr, pipErr)
					}
					if strings.TrimSpace(r.stderr) == "" {
						t.Errorf("pylayer lock failed without a message on stderr")
					}
					if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("a failed lock left %s behind (%v)", out, err)
					}
					return
				}
				if r.code != 0 {
					t.Fatalf("pip resolves %v to %v but pylayer lock exited %d:\n%s", c.Reqs, pipSet, r.code, r.stderr)
				}
				got := checkLock(t, r, out, dir)
				if !reflect.DeepEqual(got, pipSet) {
					t.Errorf("pylayer locked %v, pip installs %v", got, pipSet)
				}
			})
		}
	})
}

// TestExtLockIsDelta locks a base, then ext layers over it: the ext lock holds exactly what
// pip would install with the base pins as constraints, minus the base; a request that needs
// another version of a base pin fails and says which pin of the base blocks it.
func TestExtLockIsDelta(t *testing.T) {
	py := oracle(t)
	dir, url := index(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	work := sharedDir(t)

	baseReqs := []string{"chain-a", "cn-app"}
	basePath := filepath.Join(work, "base.lock.json")
	r := run(ctx, t, work, lockArgs(url, basePath, baseReqs, "--kind", "base")...)
	if r.code != 0 {
		t.Fatalf("base lock: exit %d\n%s", r.code, r.stderr)
	}
	base := checkLock(t, r, basePath, dir)
	wantBase, err := fixture.PipResolve(ctx, py, url, sharedDir(t), baseReqs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(base, wantBase) {
		t.Fatalf("base lock %v, pip %v", base, wantBase)
	}
	inBase := map[string]bool{}
	for _, p := range base {
		inBase[p] = true
	}

	t.Run("delta", func(t *testing.T) {
		reqs := []string{"ext-user", "ex-app[full]"}
		extPath := filepath.Join(sharedDir(t), "ext.lock.json")
		r := run(ctx, t, work, lockArgs(url, extPath, reqs, "--kind", "ext", "-c", basePath)...)
		if r.code != 0 {
			t.Fatalf("ext lock: exit %d\n%s", r.code, r.stderr)
		}
		got := checkLock(t, r, extPath, dir)
		// base is a set of "name==version" lines: pip takes them as constraints as they are.
		full, err := fixture.PipResolve(ctx, py, url, sharedDir(t), reqs, base)
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		shared := 0
		for _, p := range full {
			if inBase[p] {
				shared++
				continue
			}
			want = append(want, p)
		}
		if shared == 0 {
			t.Fatalf("test setup: %v shares nothing with the base %v", full, base)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("ext lock %v, want pip's %v minus the base %v = %v", got, full, base, want)
		}
		var lf lockFile
		data, err := os.ReadFile(extPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &lf); err != nil {
			t.Fatal(err)
		}
		if lf.Kind != "ext" {
			t.Errorf("ext lock kind %q", lf.Kind)
		}
	})

	t.Run("conflicts-with-base", func(t *testing.T) {
		extPath := filepath.Join(sharedDir(t), "ext.lock.json")
		r := run(ctx, t, work, lockArgs(url, extPath, []string{"ext-conflict"}, "--kind", "ext", "-c", basePath)...)
		if r.code != 1 {
			t.Fatalf("ext-conflict needs chain-c<2 over a base pinning chain-c 2.0: exit %d, stdout %s", r.code, r.stdout)
		}
		msg := strings.ToLower(r.stderr)
		if !strings.Contains(msg, "chain-c") || !strings.Contains(msg, "base") {
			t.Errorf("the error should name the base pin chain-c and the base; got:\n%s", r.stderr)
		}
		if _, err := os.Stat(extPath); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a failed lock left %s behind", extPath)
		}
		// Without the base the same request resolves: the base alone is what blocks it.
		if _, err := fixture.PipResolve(ctx, py, url, sharedDir(t), []string{"ext-conflict"}, nil); err != nil {
			t.Errorf("test setup: ext-conflict does not resolve even without the base: %v", err)
		}
	})
}

// TestLockErrors: bad input exits 1 with a message that names the problem on stderr, prints
// nothing on stdout and leaves no lock file.
func TestLockErrors(t *testing.T) {
	_, url := index(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	work := sharedDir(t)
	badLock := filepath.Join(work, "broken.lock.json")
	if err := os.WriteFile(badLock, []byte(`{"version": 1, "kind": "base", "packages": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		reqs     []string
		extra    []string
		mentions []string // each must appear in stderr (case-insensitive)
	}{
		{name: "malformed requirement", reqs: []string{"chain-a>>=1"}, mentions: []string{"chain-a>>=1"}},
		{name: "malformed lock as constraint", reqs: []string{"chain-a"}, extra: []string{"-c", badLock}, mentions: []string{"broken.lock.json"}},
		{name: "malformed lock as ext base", reqs: []string{"chain-a"}, extra: []string{"--kind", "ext", "-c", badLock}, mentions: []string{"broken.lock.json"}},
		{name: "sdist only", reqs: []string{"sd-only"}, mentions: []string{"sd-only"}},
		{name: "unsatisfiable", reqs: []string{"cf-a", "cf-b"}, mentions: []string{"cf-c"}},
		{name: "nonexistent", reqs: []string{"does-not-exist"}, mentions: []string{"does-not-exist"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(sharedDir(t), "lock.json")
			r := run(ctx, t, work, lockArgs(url, out, tt.reqs, tt.extra...)...)
			if r.code != 1 {
				t.Fatalf("exit %d, want 1\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
			}
			if strings.TrimSpace(r.stdout) != "" {
				t.Errorf("stdout should stay empty on failure, got %q", r.stdout)
			}
			for _, m := range tt.mentions {
				if !strings.Contains(strings.ToLower(r.stderr), strings.ToLower(m)) {
					t.Errorf("stderr does not mention %q:\n%s", m, r.stderr)
				}
			}
			entries, _ := os.ReadDir(filepath.Dir(out))
			if len(entries) != 0 {
				t.Errorf("a failed lock left files behind: %v", entries)
			}
		})
	}
}
