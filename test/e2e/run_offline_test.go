package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	registrytest "github.com/pylayer/pylayer/test/registry"
)

// TestRunWarmNoNetwork: once a host has pulled its layers, a run that names them by digest
// sends no request to the registry, and works with the registry gone; a run by tag then
// fails, saying why.
func TestRunWarmNoNetwork(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r := registrytest.Start(t, registrytest.Options{})
	ci := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
	s := publishStack(ctx, t, ci, r.Ref("team/pylayer"), "--ca-file", r.CAFile)
	h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
	// Close removes the registry's directory: keep the CA, or runs would fail on the file.
	ca, err := os.ReadFile(r.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(sharedDir(t), "ca.pem")
	if err := os.WriteFile(caFile, ca, 0o644); err != nil {
		t.Fatal(err)
	}
	reg := []string{"run", "--trust", s.pub, "--ca-file", caFile, "--timeout", "1m"}
	check := []string{"--", "python3", "-c", "import docx, foo; print(foo.__version__)"}
	session := func(t *testing.T, base, ext string) result {
		t.Helper()
		return h.run(ctx, t, append(append(reg, "--layer", base, "--layer", ext), check...)...)
	}

	// Cold: by tag, which resolves the digests and pulls.
	if res := session(t, s.baseTag, s.ext1Tag); res.code != 0 || strings.TrimSpace(res.stdout) != "1.0" {
		t.Fatalf("cold run by tag: exit %d, stdout %q\n%s", res.code, res.stdout, res.stderr)
	}

	t.Run("by digest, registry up: no request", func(t *testing.T) {
		r.ResetLog()
		res := session(t, s.base.Ref, s.ext1.Ref)
		if res.code != 0 || strings.TrimSpace(res.stdout) != "1.0" {
			t.Fatalf("warm run by digest: exit %d, stdout %q\n%s", res.code, res.stdout, res.stderr)
		}
		if reqs := r.Requests(); len(reqs) > 0 {
			t.Errorf("a warm run by digest sent %d requests to the registry, want none: %+v", len(reqs), reqs)
		}
	})

	if err := r.Close(); err != nil {
		t.Fatalf("stopping the registry: %v", err)
	}

	t.Run("by digest, registry stopped: works", func(t *testing.T) {
		res := session(t, s.base.Ref, s.ext1.Ref)
		if res.code != 0 || strings.TrimSpace(res.stdout) != "1.0" {
			t.Fatalf("warm run by digest without a registry: exit %d, stdout %q\n%s", res.code, res.stdout, res.stderr)
		}
	})

	t.Run("by tag, registry stopped: fails clearly", func(t *testing.T) {
		start := time.Now()
		res := session(t, s.base.Ref, s.ext1Tag)
		if res.code == 0 {
			t.Fatalf("a run by tag with the registry stopped succeeded:\n%s", res.stdout)
		}
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("the refusal took %s", d)
		}
		if strings.TrimSpace(res.stdout) != "" {
			t.Errorf("the failed run printed %q on stdout", res.stdout)
		}
		// It names the reference it could not resolve and the reason (the registry is down).
		if !strings.Contains(res.stderr, s.ext1Tag) || !strings.Contains(res.stderr, "connection refused") {
			t.Errorf("stderr does not say which reference failed and why:\n%s", res.stderr)
		}
	})

	t.Run("an uncached digest, registry stopped: fails clearly", func(t *testing.T) {
		res := session(t, s.base.Ref, s.ext2.Ref)
		if res.code == 0 {
			t.Fatalf("a run on an uncached digest with the registry stopped succeeded:\n%s", res.stdout)
		}
		if !strings.Contains(res.stderr, s.ext2.Ref) || !strings.Contains(res.stderr, "connection refused") {
			t.Errorf("stderr does not say which reference failed and why:\n%s", res.stderr)
		}
	})

	// The front end links no registry protocol: a warm run needs nothing else, and a run that
	// needs the network goes to pylayer-full, which the runs above had beside it.
	t.Run("the front end alone", func(t *testing.T) {
		alone := filepath.Join(sharedDir(t), "pylayer")
		b, err := os.ReadFile(pylayer(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(alone, b, 0o755); err != nil {
			t.Fatal(err)
		}
		run := func(ext string) result {
			cmd := h.command(ctx, t, append(append(reg, "--layer", s.base.Ref, "--layer", ext), check...)...)
			cmd.Path, cmd.Args[0] = alone, alone
			return runResult(t, cmd, cmd.Args[1:])
		}
		if res := run(s.ext1.Ref); res.code != 0 || strings.TrimSpace(res.stdout) != "1.0" {
			t.Errorf("a warm run by digest on the front end alone: exit %d, stdout %q\n%s", res.code, res.stdout, res.stderr)
		}
		for _, ext := range []string{s.ext2.Ref, s.ext1Tag} {
			if res := run(ext); res.code != 1 || !strings.Contains(res.stderr, "pylayer-full") || strings.TrimSpace(res.stdout) != "" {
				t.Errorf("--layer %s, not in the cache, on the front end alone: exit %d, stdout %q; want it to name pylayer-full:\n%s",
					ext, res.code, res.stdout, res.stderr)
			}
		}
	})
}
