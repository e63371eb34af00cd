package cache

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pylayer/pylayer/oci/digest"
)

func keyID(s string) string { return digest.FromString(s).String() }

func signedBy(repo string, keys ...string) Admission {
	a := Admission{Repository: repo, Rule: repo}
	for _, k := range keys {
		a.Signers = append(a.Signers, Signer{KeyID: keyID(k), DockerReference: repo})
	}
	return a
}

// TestAdmissions: every distinct admission of a digest is kept (two repositories, two
// keys, unsigned and signed), the same admission again only refreshes its time, and the
// record reads back as written, without network, from a cache opened anew.
func TestAdmissions(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	d := digest.FromString("manifest")
	if got, err := c.Admissions(ctx, d); err != nil || len(got) != 0 {
		t.Fatalf("a digest never admitted: %v, %v; want none, no error", got, err)
	}
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	steps := []struct {
		a    Admission
		want []string // repository/keys of each record after the step
	}{
		{signedBy("reg.example/team/a", "k1"), []string{"reg.example/team/a k1"}},
		{signedBy("reg.example/team/b", "k1"), []string{"reg.example/team/a k1", "reg.example/team/b k1"}},
		{signedBy("reg.example/team/a", "k1"), []string{"reg.example/team/a k1", "reg.example/team/b k1"}}, // again: refreshed
		{signedBy("reg.example/team/a", "k2"), []string{"reg.example/team/a k1", "reg.example/team/b k1", "reg.example/team/a k2"}},
		{Admission{Repository: "oci:/scratch", Rule: "oci:/scratch", Unsigned: true}, []string{"reg.example/team/a k1", "reg.example/team/b k1", "reg.example/team/a k2", "oci:/scratch unsigned"}},
		{signedBy("reg.example/team/a", "k2", "k1"), []string{"reg.example/team/a k1", "reg.example/team/b k1", "reg.example/team/a k2", "oci:/scratch unsigned", "reg.example/team/a k1+k2"}},
	}
	keyName := map[string]string{keyID("k1"): "k1", keyID("k2"): "k2"}
	for i, s := range steps {
		s.a.Time = t0.Add(time.Duration(i) * time.Minute)
		must(t, c.Admit(ctx, d, s.a))
		c2, err := Open(c.Root())
		must(t, err)
		got, err := c2.Admissions(ctx, d)
		must(t, err)
		var desc []string
		for _, a := range got {
			var ks []string
			for _, sg := range a.Signers {
				ks = append(ks, keyName[sg.KeyID])
			}
			slices.Sort(ks)
			if a.Unsigned {
				ks = []string{"unsigned"}
			}
			desc = append(desc, a.Repository+" "+strings.Join(ks, "+"))
		}
		if fmt.Sprint(desc) != fmt.Sprint(s.want) {
			t.Fatalf("after step %d: %v, want %v", i, desc, s.want)
		}
	}
	got, err := c.Admissions(ctx, d)
	must(t, err)
	if !got[0].Time.Equal(t0.Add(2*time.Minute)) || got[0].Rule != "reg.example/team/a" || got[0].Signers[0].DockerReference != "reg.example/team/a" {
		t.Errorf("the readmitted record is %+v, want its time refreshed to step 2", got[0])
	}
	// Another digest has its own record.
	if other, err := c.Admissions(ctx, digest.FromString("other")); err != nil || len(other) != 0 {
		t.Errorf("another digest: %v %v", other, err)
	}
	// A zero time means now.
	before := time.Now().Add(-time.Second)
	must(t, c.Admit(ctx, d, signedBy("reg.example/team/c", "k1")))
	got, err = c.Admissions(ctx, d)
	must(t, err)
	if last := got[len(got)-1]; last.Repository != "reg.example/team/c" || last.Time.Before(before) {
		t.Errorf("admitted with no time: %+v, want now", last)
	}
}

// TestAdmissionsBounded: past the limit, the oldest admissions go first.
func TestAdmissionsBounded(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	d := digest.FromString("m")
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range maxAdmissions + 3 {
		a := signedBy(fmt.Sprintf("reg.example/r%02d", i), "k")
		a.Time = t0.Add(time.Duration(i) * time.Hour)
		must(t, c.Admit(ctx, d, a))
	}
	got, err := c.Admissions(ctx, d)
	must(t, err)
	if len(got) != maxAdmissions {
		t.Fatalf("%d admissions kept, want %d", len(got), maxAdmissions)
	}
	for _, a := range got {
		if a.Repository < "reg.example/r03" {
			t.Errorf("kept %s, one of the 3 oldest", a.Repository)
		}
	}
}

// TestAdmitConcurrent: goroutines (each lock is its own open file, as in other processes)
// admitting one digest through different repositories at once lose none of them.
func TestAdmitConcurrent(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	d := digest.FromString("m")
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Admit(ctx, d, signedBy(fmt.Sprintf("reg.example/r%d", i), "k"))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		must(t, err)
	}
	got, err := c.Admissions(ctx, d)
	must(t, err)
	if len(got) != n {
		t.Fatalf("%d admissions after %d concurrent ones", len(got), n)
	}
	if left := names(t, c.tmpDir()); len(left) != 0 {
		t.Errorf("tmp/ holds %v after the admissions", left)
	}
}

func TestAdmitRefuses(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	d := digest.FromString("m")
	good := signedBy("reg.example/a", "k")
	for _, tc := range []struct {
		name string
		a    Admission
		d    digest.Digest
	}{
		{"no repository", Admission{Rule: "*", Signers: good.Signers}, d},
		{"no rule", Admission{Repository: "reg.example/a", Signers: good.Signers}, d},
		{"neither signed nor unsigned", Admission{Repository: "reg.example/a", Rule: "*"}, d},
		{"unsigned with signers", Admission{Repository: "reg.example/a", Rule: "*", Unsigned: true, Signers: good.Signers}, d},
		{"key ID not a digest", Admission{Repository: "reg.example/a", Rule: "*", Signers: []Signer{{KeyID: "/etc/pylayer/ci.pub"}}}, d},
		{"control character", Admission{Repository: "reg.example/a\n", Rule: "*", Signers: good.Signers}, d},
		{"huge docker reference", Admission{Repository: "reg.example/a", Rule: "*", Signers: []Signer{{KeyID: keyID("k"), DockerReference: strings.Repeat("a", 2000)}}}, d},
		{"bad digest", good, digest.Digest("sha256:../../x")},
		{"not sha256", good, digest.Digest("sha512:" + strings.Repeat("a", 128))},
	} {
		if err := c.Admit(ctx, tc.d, tc.a); err == nil {
			t.Errorf("%s: admitted", tc.name)
		}
	}
	if got, err := c.Admissions(ctx, d); err != nil || len(got) != 0 {
		t.Errorf("refused admissions left a record: %v %v", got, err)
	}
}

// TestAdmissionsDamaged: a record that is not what Admit writes is an error (never read as
// "admitted"), and the next admission replaces it.
func TestAdmissionsDamaged(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	d := digest.FromString("m")
	valid := func(digest, body string) string {
		return fmt.Sprintf(`{"version":1,"digest":%q,"admissions":[%s]}`, digest, body)
	}
	adm := `{"repository":"reg.example/a","rule":"*","signers":[{"key_id":"` + keyID("k") + `"}],"time":"2025-01-01T00:00:00Z"}`
	for _, tc := range []struct{ name, content string }{
		{"not JSON", "{"},
		{"trailing data", valid(d.String(), adm) + "{}"},
		{"unknown field", strings.Replace(valid(d.String(), adm), `"version"`, `"trusted":true,"version"`, 1)},
		{"version", strings.Replace(valid(d.String(), adm), `"version":1`, `"version":2`, 1)},
		{"another digest's record", valid(digest.FromString("x").String(), adm)},
		{"no admissions", valid(d.String(), "")},
		{"no time", valid(d.String(), strings.Replace(adm, `"time":"2025-01-01T00:00:00Z"`, `"time":"0001-01-01T00:00:00Z"`, 1))},
		{"neither signed nor unsigned", valid(d.String(), `{"repository":"reg.example/a","rule":"*","time":"2025-01-01T00:00:00Z"}`)},
		{"too big", valid(d.String(), adm) + strings.Repeat(" ", maxAdmissionsBytes)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			must(t, os.WriteFile(c.admissionsPath(d.Encoded()), []byte(tc.content), 0o644))
			if got, err := c.Admissions(ctx, d); !errors.Is(err, ErrInvalidCache) {
				t.Fatalf("Admissions = %v, %v; want ErrInvalidCache", got, err)
			}
			must(t, c.Admit(ctx, d, signedBy("reg.example/b", "k")))
			got, err := c.Admissions(ctx, d)
			must(t, err)
			if len(got) != 1 || got[0].Repository != "reg.example/b" {
				t.Fatalf("after admitting over the damaged record: %+v", got)
			}
		})
	}
	must(t, os.WriteFile(c.admissionsPath(d.Encoded()), []byte(valid(d.String(), adm)), 0o644))
	if got, err := c.Admissions(ctx, d); err != nil || len(got) != 1 {
		t.Fatalf("the hand-written valid record: %v %v", got, err)
	}
}

// TestGCRemovesAdmissions: a layer's record goes with it, and a record whose layer is gone
// is removed; a kept layer keeps its record.
func TestGCRemovesAdmissions(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	s := newStore()
	A, B := artifact(t, "A", wheelA), artifact(t, "B", wheelB)
	installAll(t, c, s, A, B)
	must(t, c.SetRef(ctx, "reg.example/a:x", A.md))
	orphan := digest.FromString("never installed")
	for _, d := range []digest.Digest{A.md, B.md, orphan} {
		must(t, c.Admit(ctx, d, signedBy("reg.example/a", "k")))
	}
	rep, err := c.GC(ctx, -1, nil)
	must(t, err)
	if len(rep.RemovedLayers) != 1 || rep.RemovedLayers[0] != B.md {
		t.Fatalf("GC removed %v, want only B", rep.RemovedLayers)
	}
	want := []string{A.md.Encoded() + ".json"}
	if got := names(t, filepath.Join(c.Root(), "admissions", "sha256")); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("admissions after GC: %v, want %v (A's only)", got, want)
	}
	if got, err := c.Admissions(ctx, A.md); err != nil || len(got) != 1 {
		t.Errorf("A's record after GC: %v %v", got, err)
	}
}

// TestMeta: the manifest and lock a layer was installed from, read back offline and
// checked against its digest; a lock changed on disk is damage, not a lock.
func TestMeta(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	s := newStore()
	A := artifact(t, "A", wheelA)
	installAll(t, c, s, A)
	m, cfg, err := c.Meta(ctx, A.md)
	must(t, err)
	if m.Config.Digest != digest.FromBytes(cfg) || len(m.Layers) != 1 || string(cfg) != `{"version":1,"kind":"base","test":"A"}` {
		t.Fatalf("Meta = %+v, %s", m, cfg)
	}
	if _, _, err := c.Meta(ctx, digest.FromString("absent")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Meta of a layer not installed: %v, want ErrNotFound", err)
	}
	root, _ := c.Layer(A.md)
	meta := filepath.Join(root, metaDir)
	must(t, os.Chmod(meta, 0o755))
	lock := filepath.Join(meta, metaLock)
	must(t, os.Chmod(lock, 0o644))
	must(t, os.WriteFile(lock, []byte(`{"version":1,"kind":"base","test":"B"}`), 0o644))
	if _, _, err := c.Meta(ctx, A.md); !errors.Is(err, ErrInvalidCache) || !strings.Contains(err.Error(), "doctor --repair") {
		t.Errorf("Meta with a changed lock: %v, want ErrInvalidCache saying what to do", err)
	}
}

// FuzzParseAdmissions: whatever a record file holds, parsing never panics, and what it
// accepts Admit would have written (every admission passes its checks).
func FuzzParseAdmissions(f *testing.F) {
	d := digest.FromString("m")
	f.Add([]byte(`{"version":1,"digest":"` + d.String() + `","admissions":[{"repository":"r/a","rule":"*","unsigned":true,"time":"2025-01-01T00:00:00Z"}]}`))
	f.Add([]byte(`{"version":1,"digest":"` + d.String() + `","admissions":[{"repository":"r/a","rule":"*","signers":[{"key_id":"` + keyID("k") + `"}],"time":"2025-01-01T00:00:00Z"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := parseAdmissions(b, d)
		if err != nil {
			if !errors.Is(err, ErrInvalidCache) {
				t.Fatalf("error %v does not wrap ErrInvalidCache", err)
			}
			return
		}
		for _, a := range got {
			if err := checkAdmission(a); err != nil {
				t.Fatalf("accepted %+v: %v", a, err)
			}
		}
	})
}

// TestAdmitKilled kills a process that keeps admitting one digest at random points: the
// record always reads back whole, and holds every admission the process had finished.
func TestAdmitKilled(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	d := digest.FromString("m")
	for round := range 8 {
		prefix := fmt.Sprintf("round%d", round)
		cmd := helperCmd(t, "admit", c.Root(), t.TempDir(), d, "PYLAYER_CACHE_PREFIX="+prefix)
		out, err := cmd.StdoutPipe()
		must(t, err)
		must(t, cmd.Start())
		sc := bufio.NewScanner(out)
		want := 1 + rand.IntN(3) // admissions finished before the kill
		done := 0
		for done < want && sc.Scan() {
			done++
		}
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
		if done < want {
			t.Fatalf("round %d: the child stopped after %d admissions", round, done)
		}
		got, err := c.Admissions(ctx, d)
		if err != nil {
			t.Fatalf("round %d: the record after a kill: %v", round, err)
		}
		seen := map[string]bool{}
		for _, a := range got {
			seen[a.Repository] = true
		}
		for i := range done {
			if r := fmt.Sprintf("reg.example/%s-%d", prefix, i); !seen[r] {
				t.Errorf("round %d: the finished admission %s is missing", round, r)
			}
		}
	}
}
