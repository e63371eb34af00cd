package registry

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	"github.com/pylayer/pylayer/oci/sign"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
	"github.com/pylayer/pylayer/registry/local"
	"github.com/pylayer/pylayer/registry/trust"
)

// hostTag and otherTag are wheel platform tags of this host's architecture and of another.
func hostTags(t *testing.T) (host, other string) {
	t.Helper()
	switch runtime.GOARCH {
	case "amd64":
		return "manylinux_2_28_x86_64", "manylinux_2_28_aarch64"
	case "arm64":
		return "manylinux_2_28_aarch64", "manylinux_2_28_x86_64"
	}
	t.Fatalf("these tests know the wheel platform tags of amd64 and arm64 hosts, not of %s", runtime.GOARCH)
	return "", ""
}

// platformArtifact is a base layer of one wheel locked for the wheel platform tag, with
// the annotations oci.LayerArtifact gives it.
func platformArtifact(t *testing.T, tag, name string) oci.Artifact {
	t.Helper()
	tg, err := target.FromFlags("3.11", tag)
	must(t, err)
	l := &lock.Lock{Version: lock.FormatVersion, Kind: lock.KindBase, Target: tg, Requirements: []string{name}}
	lb := layerBlob(t, name, "print('"+name+" for "+tag+"')\n")
	l.Packages = append(l.Packages, lock.Package{Name: name, Version: "1.0", Filename: lb.Wheel, URL: "https://index.invalid/" + lb.Wheel,
		SHA256: lb.WheelSHA256, Size: 1, RequiredBy: []string{lock.Requested}})
	canon, err := l.Content()
	must(t, err)
	return oci.Artifact{ArtifactType: oci.ArtifactTypeLayer, Config: canon, Layers: []oci.LayerBlob{lb},
		Annotations: map[string]string{oci.AnnotationKind: string(l.Kind), oci.AnnotationKey: lock.KeyOf(canon),
			oci.AnnotationPython: "3.11", oci.AnnotationPlatform: tag}}
}

// pushIndex pushes the image index of the manifests ds of repo under tag.
func pushIndex(t *testing.T, repo Repo, tag string, ds ...digest.Digest) v1.Descriptor {
	t.Helper()
	ctx := context.Background()
	var x oci.PlatformIndex
	for _, d := range ds {
		raw, err := repo.Manifest(ctx, v1.Descriptor{Digest: d})
		must(t, err)
		e, err := oci.EntryOf(raw)
		must(t, err)
		x.Entries = append(x.Entries, e)
	}
	raw, desc, err := x.Encode()
	must(t, err)
	got, err := repo.PushManifest(ctx, raw, desc.MediaType, tag)
	must(t, err)
	if got.Digest != desc.Digest {
		t.Fatalf("index pushed as %s, encoded as %s", got.Digest, desc.Digest)
	}
	return desc
}

type twoPlatforms struct {
	repo        Repo
	dir         string
	host, other digest.Digest
	otherP      oci.Platform
	k           key
	pol         *trust.Policy
}

func newTwoPlatforms(t *testing.T) *twoPlatforms {
	hostTag, otherTag := hostTags(t)
	dir := t.TempDir()
	f := &twoPlatforms{dir: dir, repo: openLayout(t, dir), k: newKey(t, "ci")}
	f.host = publish(t, f.repo, platformArtifact(t, hostTag, "alpha"), f.k)
	f.other = publish(t, f.repo, platformArtifact(t, otherTag, "alpha"), f.k)
	var err error
	f.otherP, err = oci.PlatformOf(otherTag)
	must(t, err)
	f.pol = policy(t, trust.Rule{Match: "oci:" + dir, Keys: []string{f.k.pub}})
	return f
}

func (f *twoPlatforms) ref(t *testing.T, s string) Ref {
	t.Helper()
	ref, err := ParseRef("oci:" + f.dir + s)
	must(t, err)
	return ref
}

// TestVerifyRefIndex: a tag or a digest naming a two-platform index verifies the host's
// entry, or the one ForPlatform names; an unsigned index is accepted for its signed
// entries, a signed one has its signature checked too.
func TestVerifyRefIndex(t *testing.T) {
	ctx := context.Background()
	f := newTwoPlatforms(t)
	idx := pushIndex(t, f.repo, "current", f.other, f.host)
	for _, c := range []struct {
		name string
		ref  string
		opts []VerifyOption
		want digest.Digest
		host bool
	}{
		{"tag", ":current", nil, f.host, true},
		{"digest", "@" + idx.Digest.String(), nil, f.host, true},
		{"tag, other platform", ":current", []VerifyOption{ForPlatform(f.otherP)}, f.other, false},
		{"host platform named", ":current", []VerifyOption{ForPlatform(oci.HostPlatform())}, f.host, true},
	} {
		v, err := VerifyRef(ctx, f.repo, f.ref(t, c.ref), f.pol, nil, c.opts...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if v.Desc.Digest != c.want || v.Signature == nil || v.Index == nil || v.Index.Desc.Digest != idx.Digest || v.Index.Host != c.host || v.Index.Signature != nil {
			t.Errorf("%s: verified %s (index %+v, signature %v), want entry %s of unsigned index %s, host %v", c.name, v.Desc.Digest, v.Index, v.Signature != nil, c.want, idx.Digest, c.host)
		}
		if m, err := oci.ParseManifest(v.Manifest); err != nil || digest.FromBytes(v.Manifest) != c.want || m.ArtifactType != oci.ArtifactTypeLayer {
			t.Errorf("%s: Verified.Manifest is not the entry's manifest: %v", c.name, err)
		}
	}
	// A plain manifest has no Index.
	if v, err := VerifyRef(ctx, f.repo, f.ref(t, "@"+f.host.String()), f.pol, nil); err != nil || v.Index != nil {
		t.Errorf("by the entry's own digest: %+v, %v", v, err)
	}

	// Signed by the trusted key: the index's signature is checked and reported.
	_, err := sign.Sign(ctx, f.repo, idx, f.repo.Name(), f.k.signer)
	must(t, err)
	v, err := VerifyRef(ctx, f.repo, f.ref(t, ":current"), f.pol, nil)
	if err != nil || v.Index == nil || v.Index.Signature == nil || v.Index.Signature.Subject != idx.Digest {
		t.Fatalf("signed index: %+v, %v", v, err)
	}

	// An index signed by no trusted key is refused, though its entries are signed.
	g := newTwoPlatforms(t)
	gidx := pushIndex(t, g.repo, "current", g.host, g.other)
	_, err = sign.Sign(ctx, g.repo, gidx, g.repo.Name(), newKey(t, "stranger").signer)
	must(t, err)
	for _, s := range []string{":current", "@" + gidx.Digest.String()} {
		if _, err := VerifyRef(ctx, g.repo, g.ref(t, s), g.pol, nil); !errors.Is(err, sign.ErrUntrusted) {
			t.Errorf("index %s signed by an untrusted key: %v, want ErrUntrusted", s, err)
		}
	}
}

// TestVerifyRefIndexRefuses: an index without the host's platform says which it has; an
// entry whose manifest is for another platform than its entry claims is refused; so is an
// unsigned entry of an unsigned index.
func TestVerifyRefIndexRefuses(t *testing.T) {
	ctx := context.Background()
	f := newTwoPlatforms(t)
	pushIndex(t, f.repo, "other-only", f.other)
	_, err := VerifyRef(ctx, f.repo, f.ref(t, ":other-only"), f.pol, nil)
	_, otherTag := hostTags(t)
	if !errors.Is(err, ErrNoPlatform) || !strings.Contains(err.Error(), "has "+f.otherP.String()+" ("+otherTag+")") || !strings.Contains(err.Error(), oci.HostPlatform().String()) {
		t.Errorf("index without the host's platform: %v, want ErrNoPlatform naming the host's platform and listing %s", err, f.otherP)
	}

	// An index whose host entry points at the other platform's (signed) manifest.
	raw, err := f.repo.Manifest(ctx, v1.Descriptor{Digest: f.other})
	must(t, err)
	hp := oci.HostPlatform()
	lie := v1.Index{MediaType: v1.MediaTypeImageIndex, Manifests: []v1.Descriptor{{MediaType: v1.MediaTypeImageManifest, Digest: f.other, Size: int64(len(raw)),
		Platform: &v1.Platform{OS: hp.OS, Architecture: hp.Architecture}, Annotations: map[string]string{oci.AnnotationLibc: hp.Libc}}}}
	lie.SchemaVersion = 2
	b, err := json.Marshal(lie)
	must(t, err)
	_, err = f.repo.PushManifest(ctx, b, v1.MediaTypeImageIndex, "lie")
	must(t, err)
	if _, err := VerifyRef(ctx, f.repo, f.ref(t, ":lie"), f.pol, nil); !errors.Is(err, ErrInconsistent) {
		t.Errorf("an entry for the host pointing at the other platform's artifact: %v, want ErrInconsistent", err)
	}

	// The entry must be signed itself: an unsigned index does not vouch for it.
	hostTag, _ := hostTags(t)
	unsigned := publish(t, f.repo, platformArtifact(t, hostTag, "beta"))
	pushIndex(t, f.repo, "unsigned-entry", unsigned, f.other)
	if _, err := VerifyRef(ctx, f.repo, f.ref(t, ":unsigned-entry"), f.pol, nil); !errors.Is(err, sign.ErrNoSignature) {
		t.Errorf("an unsigned entry: %v, want ErrNoSignature", err)
	}
}

// TestEnsureIndexDigest: a reference by an index's digest is pulled through its entry for
// this host, and used from then on with no network, like any reference by digest.
func TestEnsureIndexDigest(t *testing.T) {
	ctx := context.Background()
	f := newTwoPlatforms(t)
	idx := pushIndex(t, f.repo, "current", f.host, f.other)
	ref := f.ref(t, "@"+idx.Digest.String())
	c := openCache(t)
	var o opener
	for i := range 2 {
		u, release, err := Ensure(ctx, c, ref, f.pol, o.open(ref), nil, nil)
		if err != nil {
			t.Fatalf("ensure %d: %v", i, err)
		}
		release()
		if u.Digest != f.host || u.Root == "" {
			t.Fatalf("ensure %d: used %s, want the host's entry %s", i, u.Digest, f.host)
		}
	}
	if o.n != 1 {
		t.Errorf("the repository was opened %d times, want once (the second use is offline)", o.n)
	}
	if d, err := c.Ref(ctx, local.IndexRef(ref.Name(), idx.Digest)); err != nil || d != f.host {
		t.Errorf("the cache records index %s as %s, %v; want %s", idx.Digest, d, err, f.host)
	}

	// A pull of the other platform installs it but does not record it for the index.
	c2 := openCache(t)
	_, v, err := Pull(ctx, f.repo, ref, f.pol, c2, nil, nil, ForPlatform(f.otherP))
	must(t, err)
	if v.Desc.Digest != f.other {
		t.Fatalf("pull --platform %s got %s, want %s", f.otherP, v.Desc.Digest, f.other)
	}
	if d, err := c2.Ref(ctx, local.IndexRef(ref.Name(), idx.Digest)); err == nil {
		t.Errorf("a pull for another platform recorded the index as %s", d)
	}
}

// TestVerifyRefIndexRemote: a registry answers a tag of an index with its media type,
// which VerifyRef follows to the host's entry.
func TestVerifyRefIndexRemote(t *testing.T) {
	ctx := context.Background()
	s := newServer(t, false)
	repo := openRepo(t, s, "team/pylayer", quick())
	hostTag, otherTag := hostTags(t)
	k := newKey(t, "ci")
	host := publish(t, repo, platformArtifact(t, hostTag, "alpha"), k)
	other := publish(t, repo, platformArtifact(t, otherTag, "alpha"), k)
	idx := pushIndex(t, repo, "current", host, other)
	_, err := sign.Sign(ctx, repo, idx, repo.Name(), k.signer)
	must(t, err)
	pol := policy(t, trust.Rule{Match: repo.Name(), Keys: []string{k.pub}})
	for _, s := range []string{":current", "@" + idx.Digest.String()} {
		ref, err := ParseRef(repo.Name() + s)
		must(t, err)
		v, err := VerifyRef(ctx, repo, ref, pol, nil)
		if err != nil || v.Desc.Digest != host || v.Index == nil || v.Index.Signature == nil {
			t.Errorf("%s: %+v, %v; want the host's entry %s of the signed index", s, v, err, host)
		}
	}
}
