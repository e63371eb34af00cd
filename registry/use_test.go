package registry

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	"github.com/pylayer/pylayer/oci/sign"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
	"github.com/pylayer/pylayer/registry/cache"
	"github.com/pylayer/pylayer/registry/trust"
)

// key is a cosign key pair made for a test: its signer and the path of its .pub file.
type key struct {
	signer sign.Signer
	pub    string
}

func newKey(t testing.TB, name string) key {
	t.Helper()
	dir := t.TempDir()
	priv, pub, err := sign.GenerateKeyPair([]byte("pw"))
	must(t, err)
	k := key{pub: filepath.Join(dir, name+".pub")}
	must(t, os.WriteFile(filepath.Join(dir, name+".key"), priv, 0o600))
	must(t, os.WriteFile(k.pub, pub, 0o644))
	k.signer, err = sign.LoadSigner(context.Background(), filepath.Join(dir, name+".key"), func() ([]byte, error) { return []byte("pw"), nil })
	must(t, err)
	return k
}

// lockedArtifact is a base layer whose lock names exactly its blobs (one wheel per name,
// as layerBlob makes them).
func lockedArtifact(t testing.TB, names ...string) (oci.Artifact, *lock.Lock) {
	t.Helper()
	tg, err := target.FromFlags("3.11", "manylinux_2_28_x86_64")
	must(t, err)
	l := &lock.Lock{Version: lock.FormatVersion, Kind: lock.KindBase, Target: tg, Requirements: names}
	var blobs []oci.LayerBlob
	for _, n := range names { // sorted, as a parsed lock is
		lb := layerBlob(t, n, "print('"+n+"')\n")
		blobs = append(blobs, lb)
		l.Packages = append(l.Packages, lock.Package{Name: n, Version: "1.0", Filename: lb.Wheel, URL: "https://index.invalid/" + lb.Wheel,
			SHA256: lb.WheelSHA256, Size: 1, RequiredBy: []string{lock.Requested}})
	}
	canon, err := l.Content() // what oci.LayerArtifact puts in the config
	must(t, err)
	return oci.Artifact{ArtifactType: oci.ArtifactTypeLayer, Config: canon, Layers: blobs,
		Annotations: map[string]string{oci.AnnotationKind: string(l.Kind), oci.AnnotationKey: lock.KeyOf(canon)}}, l
}

// publish pushes a into repo and signs it with the given keys (claiming repo), as pylayer
// publish does.
func publish(t testing.TB, repo Repo, a oci.Artifact, keys ...key) digest.Digest {
	t.Helper()
	ctx := context.Background()
	desc, _, err := Push(ctx, repo, a, "")
	must(t, err)
	for _, k := range keys {
		_, err := sign.Sign(ctx, repo, desc, repo.Name(), k.signer)
		must(t, err)
	}
	return desc.Digest
}

// policy writes rules as a policy file and loads it.
func policy(t testing.TB, rules ...trust.Rule) *trust.Policy {
	t.Helper()
	b, err := json.Marshal(map[string]any{"repositories": rules})
	must(t, err)
	p := filepath.Join(t.TempDir(), "policy.json")
	must(t, os.WriteFile(p, b, 0o644))
	pol, err := trust.Load(p)
	must(t, err)
	return pol
}

func layoutRef(t *testing.T, dir string, d digest.Digest) Ref {
	t.Helper()
	ref, err := ParseRef("oci:" + dir + "@" + d.String())
	must(t, err)
	return ref
}

// opener opens the layouts of refs and counts how often Ensure needed to.
type opener struct{ n int }

func (o *opener) open(ref Ref) func(context.Context) (Repo, error) {
	return func(ctx context.Context) (Repo, error) {
		o.n++
		return Open(ctx, ref, Options{})
	}
}

func openCache(t *testing.T) *cache.Cache {
	t.Helper()
	root := filepath.Join(t.TempDir(), "cache")
	c, err := cache.Open(root)
	must(t, err)
	t.Cleanup(func() { // the cache makes its trees read-only
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(p, 0o755)
			}
			return nil
		})
	})
	return c
}

// TestEnsureRechecksPolicy: what the cache holds is used only while the current policy
// accepts how it was admitted, decided offline (no repository is opened) on every use.
func TestEnsureRechecksPolicy(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	scratchDir, teamDir, mirrorDir := filepath.Join(base, "scratch"), filepath.Join(base, "team"), filepath.Join(base, "mirror")
	scratch, team, mirror := openLayout(t, scratchDir), openLayout(t, teamDir), openLayout(t, mirrorDir)
	ka, kb := newKey(t, "a"), newKey(t, "b")
	x, _ := lockedArtifact(t, "alpha", "beta")
	dx := publish(t, scratch, x) // unsigned, in the scratch layout only
	publish(t, team, x)          // and unsigned in team too
	y, _ := lockedArtifact(t, "gamma")
	dy := publish(t, team, y, ka)
	publish(t, mirror, y, ka)

	open := policy(t,
		trust.Rule{Match: "oci:" + scratchDir, InsecureAcceptUnsigned: true},
		trust.Rule{Match: "oci:" + teamDir, Keys: []string{ka.pub}},
		trust.Rule{Match: "oci:" + mirrorDir, Keys: []string{ka.pub}},
	)
	rotated := policy(t, // key a removed everywhere, b trusted instead
		trust.Rule{Match: "oci:" + scratchDir, InsecureAcceptUnsigned: true},
		trust.Rule{Match: "oci:" + teamDir, Keys: []string{kb.pub}},
		trust.Rule{Match: "oci:" + mirrorDir, Keys: []string{kb.pub}},
	)
	strict := policy(t,
		trust.Rule{Match: "oci:" + teamDir, Keys: []string{ka.pub}},
		trust.Rule{Match: "oci:" + mirrorDir, Keys: []string{ka.pub}, RequireDockerReference: true},
	)
	c := openCache(t)
	var warnings []string
	warn := func(s string) { warnings = append(warnings, s) }

	steps := []struct {
		name    string
		ref     Ref
		pol     *trust.Policy
		opens   int      // how often the repository may be opened
		want    error    // nil: used
		why     []string // in the refusal
		warning string   // in the warnings of this step
	}{
		{name: "unsigned from its exempt layout: pulled, loudly", ref: layoutRef(t, scratchDir, dx), pol: open, opens: 1, warning: "NOT verifying"},
		{name: "cached unsigned, from that layout again: offline, loudly", ref: layoutRef(t, scratchDir, dx), pol: open, warning: "UNVERIFIED"},
		{name: "cached unsigned, by digest from a repository that requires a key", ref: layoutRef(t, teamDir, dx), pol: open,
			want: trust.ErrNotAdmitted, why: []string{"unsigned through oci:" + scratchDir, "an unsigned exception stays in its repository", "pull it again from oci:" + teamDir + " with a key the policy trusts"}},
		{name: "signed by a: pulled", ref: layoutRef(t, teamDir, dy), pol: open, opens: 1},
		{name: "signed by a, cached: offline", ref: layoutRef(t, teamDir, dy), pol: open},
		{name: "from another repository that trusts the same key: offline", ref: layoutRef(t, mirrorDir, dy), pol: open},
		{name: "key a removed: refused at once, offline", ref: layoutRef(t, teamDir, dy), pol: rotated,
			want: trust.ErrNotAdmitted, why: []string{"the key that admitted it (sha256:", "was removed from the policy for oci:" + teamDir}},
		{name: "key a back: works again", ref: layoutRef(t, teamDir, dy), pol: open},
		{name: "docker-reference required: the team signature names team, not mirror", ref: layoutRef(t, mirrorDir, dy), pol: strict,
			want: trust.ErrNotAdmitted, why: []string{"requires one that names oci:" + mirrorDir}},
		{name: "no policy at all", ref: layoutRef(t, teamDir, dy), pol: nil, want: trust.ErrNoPolicy},
	}
	for _, s := range steps {
		warnings = nil
		o := &opener{}
		u, release, err := Ensure(ctx, c, s.ref, s.pol, o.open(s.ref), nil, warn)
		if o.n != s.opens {
			t.Errorf("%s: the repository was opened %d times, want %d", s.name, o.n, s.opens)
		}
		if s.want != nil {
			if !errors.Is(err, s.want) {
				t.Fatalf("%s: got %+v, %v; want %v", s.name, u, err, s.want)
			}
			for _, w := range s.why {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%s: the refusal does not say %q:\n%v", s.name, w, err)
				}
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		release()
		if u.Digest != s.ref.Digest || u.Kind != "base" || u.Fit == nil || u.Fit.Kind != "base" || u.Target != nil {
			t.Errorf("%s: %+v", s.name, u)
		}
		if root, _ := c.Layer(s.ref.Digest); u.Root != root {
			t.Errorf("%s: root %s, want %s", s.name, u.Root, root)
		}
		if got := strings.Join(warnings, "\n"); (s.warning == "") != (got == "") || !strings.Contains(got, s.warning) {
			t.Errorf("%s: warnings %q, want one saying %q", s.name, got, s.warning)
		}
	}
	// The cache recorded both admissions of y, through team and mirror, by key a.
	recs, err := c.Admissions(ctx, dy)
	must(t, err)
	ida, err := sign.LoadVerifier(ctx, ka.pub)
	must(t, err)
	if len(recs) != 1 || recs[0].Repository != "oci:"+teamDir || recs[0].Signers[0].KeyID != ida.KeyIDs()[0] {
		t.Errorf("admissions of y: %+v, want one, through team, by key a (mirror was used, not pulled)", recs)
	}
}

// TestRequireDockerReferenceAtPull: under require_docker_reference, a trusted signature
// made for another repository does not admit an artifact.
func TestRequireDockerReferenceAtPull(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	teamDir, copyDir := filepath.Join(base, "team"), filepath.Join(base, "copy")
	team, cp := openLayout(t, teamDir), openLayout(t, copyDir)
	k := newKey(t, "a")
	a, _ := lockedArtifact(t, "alpha")
	d := publish(t, team, a, k)
	// The same artifact in another layout, signed there by k but claiming team.
	desc, _, err := Push(ctx, cp, a, "")
	must(t, err)
	_, err = sign.Sign(ctx, cp, desc, team.Name(), k.signer)
	must(t, err)
	pol := policy(t, trust.Rule{Match: "oci:" + base + "/*", Keys: []string{k.pub}, RequireDockerReference: true})
	c := openCache(t)
	if _, _, err := Pull(ctx, cp, layoutRef(t, copyDir, d), pol, c, nil, nil); !errors.Is(err, ErrReferenceMismatch) {
		t.Fatalf("pull of a signature made for another repository: %v, want ErrReferenceMismatch", err)
	}
	if _, ok := c.Layer(d); ok {
		t.Fatal("the refused pull installed the layer")
	}
	root, v, err := Pull(ctx, team, layoutRef(t, teamDir, d), pol, c, nil, nil)
	must(t, err)
	if v.Unsigned || root == "" {
		t.Fatalf("pull from the repository it was signed for: %+v", v)
	}
}

// TestPullRefusesInconsistent: a signed manifest whose layers contradict its own lock is
// refused before anything is unpacked; the same check refuses it when it is already cached.
func TestPullRefusesInconsistent(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "team")
	repo := openLayout(t, dir)
	k := newKey(t, "a")
	a, _ := lockedArtifact(t, "alpha", "beta")
	other, _ := lockedArtifact(t, "alpha", "evil")
	a.Layers = other.Layers // the lock says alpha and beta, the blobs are alpha and evil
	d := publish(t, repo, a, k)
	pol := policy(t, trust.Rule{Match: "oci:" + dir, Keys: []string{k.pub}})
	c := openCache(t)
	_, _, err := Pull(ctx, repo, layoutRef(t, dir, d), pol, c, nil, nil)
	if !errors.Is(err, ErrInconsistent) || !strings.Contains(err.Error(), "evil-1.0-py3-none-any.whl") || !strings.Contains(err.Error(), "do not use it") {
		t.Fatalf("pull: %v, want ErrInconsistent naming the wheel", err)
	}
	o := &opener{}
	if _, _, err := Ensure(ctx, c, layoutRef(t, dir, d), pol, o.open(layoutRef(t, dir, d)), nil, nil); !errors.Is(err, ErrInconsistent) {
		t.Fatalf("ensure: %v, want ErrInconsistent", err)
	}
	for _, sub := range []string{"layers/sha256", "trees/sha256", "admissions/sha256"} {
		if es, _ := os.ReadDir(filepath.Join(c.Root(), sub)); len(es) != 0 {
			t.Errorf("the refused pulls left %d entries in %s", len(es), sub)
		}
	}
	// Installed behind the check's back (as an older pylayer would have), it is refused on use.
	m, err := oci.ParseManifest(mustManifest(t, repo, d))
	must(t, err)
	raw := mustManifest(t, repo, d)
	_, err = c.Install(ctx, d, raw, repo.Blob, nil)
	must(t, err)
	must(t, c.Admit(ctx, d, cache.Admission{Repository: "oci:" + dir, Rule: "oci:" + dir, Signers: []cache.Signer{{KeyID: keyIDOf(t, k), DockerReference: "oci:" + dir}}}))
	if _, err := CheckUse(ctx, c, pol, "oci:"+dir, d); !errors.Is(err, ErrInconsistent) {
		t.Fatalf("CheckUse of a cached inconsistent layer (%d blobs): %v, want ErrInconsistent", len(m.Layers), err)
	}
	if _, err := os.Stat(filepath.Join(c.Root(), "admissions", "sha256", d.Encoded()+".use.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused use kept a use record: %v", err)
	}
	if _, err := CheckUse(ctx, c, pol, "oci:"+dir, d); !errors.Is(err, ErrInconsistent) {
		t.Fatalf("CheckUse again: %v, want ErrInconsistent every time", err)
	}
}

func mustManifest(t *testing.T, repo Repo, d digest.Digest) []byte {
	t.Helper()
	b, err := repo.Manifest(context.Background(), v1.Descriptor{Digest: d})
	must(t, err)
	return b
}

func keyIDOf(t *testing.T, k key) string {
	t.Helper()
	v, err := sign.LoadVerifier(context.Background(), k.pub)
	must(t, err)
	return v.KeyIDs()[0]
}

// TestCheckConsistent: the one check verify, pull and run share.
func TestCheckConsistent(t *testing.T) {
	a, _ := lockedArtifact(t, "alpha", "beta")
	mk := func(edit func(m *v1.Manifest)) *v1.Manifest {
		raw, _, err := a.Manifest()
		must(t, err)
		m, err := oci.ParseManifest(raw)
		must(t, err)
		if edit != nil {
			edit(m)
		}
		return m
	}
	for _, c := range []struct {
		name   string
		m      *v1.Manifest
		config []byte
		want   string // "" consistent; else in the error
	}{
		{"as published", mk(nil), a.Config, ""},
		{"key annotation", mk(func(m *v1.Manifest) { m.Annotations[oci.AnnotationKey] = strings.Repeat("0", 64) }), a.Config, "key annotation"},
		{"kind annotation", mk(func(m *v1.Manifest) { m.Annotations[oci.AnnotationKind] = "iso" }), a.Config, "kind annotation"},
		{"a blob too few", mk(func(m *v1.Manifest) { m.Layers = m.Layers[:1] }), a.Config, "1 layer blobs for the 2 wheels"},
		{"blobs swapped", mk(func(m *v1.Manifest) { m.Layers[0], m.Layers[1] = m.Layers[1], m.Layers[0] }), a.Config, "layer blob 0 is beta"},
		{"wheel hash", mk(func(m *v1.Manifest) { m.Layers[1].Annotations[oci.AnnotationWheelSHA256] = strings.Repeat("f", 64) }), a.Config, "layer blob 1"},
		{"wheel filename", mk(func(m *v1.Manifest) {
			m.Layers[1].Annotations[oci.AnnotationWheelFilename] = "evil-1.0-py3-none-any.whl"
		}), a.Config, "evil"},
		{"legacy wheel title", mk(func(m *v1.Manifest) {
			delete(m.Layers[1].Annotations, oci.AnnotationWheelFilename)
			m.Layers[1].Annotations[v1.AnnotationTitle] = "evil-1.0-py3-none-any.whl"
		}), a.Config, "evil"},
		{"config not a lock", mk(nil), []byte(`{"lock":"test"}`), "invalid lock"},
		{"not pylayer", mk(func(m *v1.Manifest) { m.ArtifactType = "application/x" }), a.Config, "not a pylayer artifact"},
		{"config media type", mk(func(m *v1.Manifest) { m.Config.MediaType = "application/json" }), a.Config, "its config is a"},
		{"interpreter type on a layer", mk(func(m *v1.Manifest) { m.ArtifactType = oci.ArtifactTypePython }), a.Config, "its config is a"},
		{"interpreter config that is a lock", mk(func(m *v1.Manifest) {
			m.ArtifactType, m.Config.MediaType = oci.ArtifactTypePython, oci.ConfigMediaType(oci.ArtifactTypePython)
		}), a.Config, "interpreter config"},
	} {
		err := CheckConsistent(c.m, c.config)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want an error saying %q", c.name, err, c.want)
		}
	}
}

// BenchmarkCheckUse: what every run pays per layer for the trust check on a warm cache
// (admission record, policy keys, cached manifest and lock re-checked), for a 30-wheel
// layer.
func BenchmarkCheckUse(b *testing.B) {
	ctx := context.Background()
	dir := filepath.Join(b.TempDir(), "team")
	repo, err := Open(ctx, Ref{Layout: dir}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	var names []string
	for i := range 30 {
		names = append(names, "pkg"+string(rune('a'+i/26))+string(rune('a'+i%26)))
	}
	k := newKey(b, "a")
	a, _ := lockedArtifact(b, names...)
	d := publish(b, repo, a, k)
	pol := policy(b, trust.Rule{Match: "oci:" + dir, Keys: []string{k.pub}})
	root := filepath.Join(b.TempDir(), "cache")
	c, err := cache.Open(root)
	if err != nil {
		b.Fatal(err)
	}
	if _, _, err := Pull(ctx, repo, Ref{Layout: dir, Digest: d}, pol, c, nil, nil); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := CheckUse(ctx, c, pol, "oci:"+dir, d); err != nil {
			b.Fatal(err)
		}
	}
}

// TestUseRecord: the first use of a digest (pull's) keeps what it derived from the manifest
// and lock in the cache; later uses read it back and decide the policy afresh each time; a
// record that is damaged, of another digest or of another format is derived again and
// replaced; an inconsistent artifact never gets one; gc removes it with its layer.
func TestUseRecord(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "team")
	repo := openLayout(t, dir)
	ka, kb := newKey(t, "a"), newKey(t, "b")
	a, l := lockedArtifact(t, "alpha", "beta")
	d := publish(t, repo, a, ka)
	pol := policy(t, trust.Rule{Match: "oci:" + dir, Keys: []string{ka.pub}})
	c := openCache(t)
	_, _, err := Pull(ctx, repo, layoutRef(t, dir, d), pol, c, nil, nil)
	must(t, err)
	path := filepath.Join(c.Root(), "admissions", "sha256", d.Encoded()+".use.json")
	kept, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the pull kept no use record: %v", err)
	}
	want, err := l.Fit()
	must(t, err)
	var rec struct {
		Digest string   `json:"digest"`
		Kind   string   `json:"kind"`
		Layer  lock.Fit `json:"layer"`
	}
	must(t, json.Unmarshal(kept, &rec))
	if rec.Digest != d.String() || rec.Kind != "base" || rec.Layer.ResolutionKey != want.ResolutionKey ||
		strings.Join(rec.Layer.Wheels, " ") != "alpha-1.0-py3-none-any.whl beta-1.0-py3-none-any.whl" {
		t.Fatalf("use record %s, want the lock's fit %+v", kept, want)
	}
	check := func(name string) {
		t.Helper()
		u, err := CheckUse(ctx, c, pol, "oci:"+dir, d)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if u.Kind != "base" || u.Target != nil || u.Fit == nil || u.Fit.ResolutionKey != want.ResolutionKey ||
			strings.Join(u.Fit.Wheels, " ") != strings.Join(want.Wheels, " ") || u.Fit.Target.Platform != want.Target.Platform {
			t.Fatalf("%s: use %+v, want the lock's fit %+v", name, u, want)
		}
	}
	check("from the record")
	// The policy is decided on every use, record or not.
	if _, err := CheckUse(ctx, c, policy(t, trust.Rule{Match: "oci:" + dir, Keys: []string{kb.pub}}), "oci:"+dir, d); !errors.Is(err, trust.ErrNotAdmitted) {
		t.Fatalf("a use under a policy without the signing key: %v, want ErrNotAdmitted", err)
	}
	other := strings.Replace(string(kept), d.Encoded(), strings.Repeat("0", 64), 1)
	for name, bad := range map[string]string{
		"garbage":              "{not json",
		"empty":                "",
		"another digest's":     other,
		"another format's":     strings.Replace(string(kept), `"format":1`, `"format":0`, 1),
		"a kind its fit lacks": strings.Replace(string(kept), `"kind":"base","layer"`, `"kind":"iso","layer"`, 1),
		"trailing data":        string(kept) + "{}",
		"an unknown field":     strings.Replace(string(kept), `"format":1`, `"format":1,"extra":true`, 1),
		"an invalid target":    strings.Replace(string(kept), `"abi":"cp311"`, `"abi":""`, 1),
		"a bad resolution key": strings.Replace(string(kept), want.ResolutionKey, "abc", 1),
	} {
		if bad == string(kept) {
			t.Fatalf("%s: the damage did not apply to %s", name, kept)
		}
		must(t, os.WriteFile(path, []byte(bad), 0o644))
		check(name + " record")
		if b, _ := os.ReadFile(path); string(b) != string(kept) {
			t.Errorf("%s record: not replaced by the derived one: %s", name, b)
		}
	}
	// gc removes the record with its layer.
	if _, err := c.GC(ctx, 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Layer(d); ok {
		t.Fatal("gc kept the layer")
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("gc left the use record: %v", err)
	}
	// A record without its layer (a crash between the two) goes at the next gc.
	must(t, os.WriteFile(path, kept, 0o644))
	if _, err := c.GC(ctx, 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("gc left an orphan use record: %v", err)
	}
	if err := c.SetUseRecord(ctx, d, kept); !errors.Is(err, cache.ErrNotFound) {
		t.Errorf("SetUseRecord of a digest the cache lacks: %v, want ErrNotFound", err)
	}
}
