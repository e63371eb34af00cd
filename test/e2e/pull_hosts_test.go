package e2e

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPullTwoHosts: two hosts (own HOME, own cache) pull one reference and end with the
// same layer digest, the same blob trees and identical layer roots (paths, bytes, modes).
func TestPullTwoHosts(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, lk, ci, priv, pub := ciRegistry(ctx, t)
	p := ci.publish(ctx, t, lk["office"], r.Ref("team/pylayer"), priv, "--ca-file", r.CAFile)
	ref := r.Ref("team/pylayer") + ":" + p.Tag

	hosts := []*host{newHost(t, "DOCKER_CONFIG="+r.DockerConfig), newHost(t, "DOCKER_CONFIG="+r.DockerConfig)}
	got := make([]pulled, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Go(func() {
			cmd := h.command(ctx, t, "pull", ref, "--trust", pub, "--ca-file", r.CAFile)
			out, err := cmd.Output()
			if err != nil {
				t.Errorf("host %d: pylayer pull: %v", i, err)
			}
			got[i].Root = strings.TrimSpace(string(out))
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	a, b := hosts[0], hosts[1]
	if filepath.Base(got[0].Root) != filepath.Base(got[1].Root) || filepath.Base(got[0].Root) != strings.TrimPrefix(p.Digest, "sha256:") {
		t.Fatalf("roots %s and %s, want both named by %s", got[0].Root, got[1].Root, p.Digest)
	}
	for _, kind := range []string{"layers", "trees"} {
		ea, eb := cacheEntries(t, a.cache, kind), cacheEntries(t, b.cache, kind)
		if strings.Join(ea, " ") != strings.Join(eb, " ") {
			t.Errorf("%s differ:\n%v\n%v", kind, ea, eb)
		}
		for _, e := range ea {
			sa := snapshot(t, filepath.Join(a.cache, kind, "sha256", e))
			sb := snapshot(t, filepath.Join(b.cache, kind, "sha256", e))
			if d := diffSnapshots(sa, sb); len(d) > 0 {
				t.Errorf("%s/%s differs between the hosts:\n%s", kind, e, strings.Join(d, "\n"))
			}
		}
	}
	if n := len(snapshot(t, got[0].Root)); n < 100 {
		t.Errorf("the layer root has %d entries; the office set has far more", n)
	}
	importCheck(ctx, t, got[1].Root)
}

// TestPullConcurrentAndKilled: 16 pulls of one reference into one fresh cache at once all
// succeed with the same root while each blob is fetched once; then pulls killed with
// SIGKILL at random points never leave a partial tree or layer visible, and a later pull
// completes.
func TestPullConcurrentAndKilled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, lk, ci, priv, pub := ciRegistry(ctx, t)
	p := ci.publish(ctx, t, lk["office"], r.Ref("team/pylayer"), priv, "--ca-file", r.CAFile)
	m := registryManifest(ctx, t, r, "team/pylayer", p.Digest)
	pullArgs := []string{"pull", p.Ref, "--trust", pub, "--ca-file", r.CAFile}

	t.Run("16 at once", func(t *testing.T) {
		h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
		r.ResetLog()
		const n = 16
		cmds := make([]*exec.Cmd, n)
		outs := make([]*bytes.Buffer, n)
		errs := make([]*bytes.Buffer, n)
		for i := range cmds {
			cmds[i] = h.command(ctx, t, pullArgs...)
			outs[i], errs[i] = &bytes.Buffer{}, &bytes.Buffer{}
			cmds[i].Stdout, cmds[i].Stderr = outs[i], errs[i]
		}
		start := time.Now()
		for i, c := range cmds {
			if err := c.Start(); err != nil {
				t.Fatalf("starting pull %d: %v", i, err)
			}
		}
		for i, c := range cmds {
			if err := c.Wait(); err != nil {
				t.Errorf("pull %d: %v\n%s", i, err, errs[i])
			}
		}
		elapsed := time.Since(start)
		for i := range outs {
			if got := strings.TrimSpace(outs[i].String()); got != strings.TrimSpace(outs[0].String()) || got == "" {
				t.Errorf("pull %d printed %q, pull 0 %q", i, got, outs[0])
			}
		}
		gets := map[string]int{}
		for _, l := range m.Layers {
			gets[l.Annotations["org.opencontainers.image.title"]] = r.BlobGETs(l.Digest)
			if gets[l.Annotations["org.opencontainers.image.title"]] != 1 {
				t.Errorf("blob %s was fetched %d times by 16 concurrent pulls, want once", l.Digest, r.BlobGETs(l.Digest))
			}
		}
		if ls := cacheEntries(t, h.cache, "layers"); len(ls) != 1 {
			t.Errorf("layers/sha256 holds %v, want one layer root", ls)
		}
		assertWrittenOnce(t, h.cache, strings.TrimSpace(outs[0].String()), m.Layers)
		h.must(ctx, t, "doctor")
		t.Logf("16 concurrent pulls in %v; GETs per layer blob: %v; config GETs: %d", elapsed.Round(time.Millisecond), gets, r.BlobGETs(m.Config.Digest))
	})

	t.Run("kill -9", func(t *testing.T) {
		// A complete pull, for its duration and the trees and root every survivor must equal.
		ref := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
		start := time.Now()
		root := ref.must(ctx, t, pullArgs...)
		typical := time.Since(start)
		want := map[string]map[string]string{"layers/" + filepath.Base(root): snapshot(t, root)}
		for _, e := range cacheEntries(t, ref.cache, "trees") {
			want["trees/"+e] = snapshot(t, filepath.Join(ref.cache, "trees", "sha256", e))
		}
		const rounds = 12
		finished := 0
		for i := range rounds {
			h := newHost(t, "DOCKER_CONFIG="+r.DockerConfig)
			cmd := h.command(ctx, t, pullArgs...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			delay := time.Duration(rand.Int64N(int64(typical)))
			time.Sleep(delay)
			_ = cmd.Process.Kill()
			if err := cmd.Wait(); err == nil {
				finished++
			}
			visible := 0
			for _, kind := range []string{"layers", "trees"} {
				for _, e := range cacheEntries(t, h.cache, kind) {
					exp, ok := want[kind+"/"+e]
					if !ok {
						t.Errorf("round %d (killed after %v): unexpected %s/sha256/%s", i, delay, kind, e)
						continue
					}
					visible++
					if d := diffSnapshots(exp, snapshot(t, filepath.Join(h.cache, kind, "sha256", e))); len(d) > 0 {
						t.Errorf("round %d (killed after %v): %s/sha256/%s is partial:\n%s", i, delay, kind, e, strings.Join(d, "\n"))
					}
				}
			}
			if res := h.run(ctx, t, "doctor"); res.code != 0 {
				t.Errorf("round %d (killed after %v): pylayer doctor: exit %d\n%s%s", i, delay, res.code, res.stdout, res.stderr)
			}
			if got := h.must(ctx, t, pullArgs...); filepath.Base(got) != filepath.Base(root) {
				t.Errorf("round %d: the pull after the kill printed %s, want a root named %s", i, got, filepath.Base(root))
			}
			h.must(ctx, t, "doctor")
			t.Logf("round %d: killed after %v; %d trees/layers were visible", i, delay.Round(time.Millisecond), visible)
		}
		t.Logf("a complete pull took %v; %d of %d pulls finished before the kill", typical.Round(time.Millisecond), finished, rounds)
	})
}
