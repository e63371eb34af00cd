//go:build !lean

package cli

import (
	"runtime"
	"strings"
	"testing"
)

// TestPublishPlatformIndex: two locks of one requirement for two platforms are published
// under one tag as an image index; pull takes the host's entry, --platform the other;
// verify says which index the artifact came from; an index without the host's platform
// names the platforms it has.
func TestPublishPlatformIndex(t *testing.T) {
	var hostTag, otherTag, otherPlatform string
	switch runtime.GOARCH {
	case "amd64":
		hostTag, otherTag, otherPlatform = "manylinux_2_28_x86_64", "manylinux_2_28_aarch64", "linux/arm64"
	case "arm64":
		hostTag, otherTag, otherPlatform = "manylinux_2_28_aarch64", "manylinux_2_28_x86_64", "linux/amd64"
	default:
		t.Fatalf("this test knows the wheel platform tags of amd64 and arm64 hosts, not of %s", runtime.GOARCH)
	}
	e := newEnv(t)
	prefix := e.path("cosign")
	if _, _, err := e.run("keygen", "--output-key-prefix", prefix); err != nil {
		t.Fatal(err)
	}
	priv, pub := prefix+".key", prefix+".pub"
	lock := func(name, platform string) string {
		p := e.path(name + ".lock.json")
		e.must(nil, "lock", "pin", "--index-url", e.index, "--python", "3.11", "--platform", platform, "-o", p)
		return p
	}
	hostLock, otherLock, muslLock := lock("host", hostTag), lock("other", otherTag), lock("musl", "musllinux_1_2_"+strings.SplitN(hostTag, "_", 4)[3])
	repo := "oci:" + e.path("repo")

	type entry struct {
		Platform, Digest, Ref, Tag string
		Pushed                     bool
	}
	var idx struct {
		Ref, Digest string
		Tags        []string
		Pushed      bool
		SignedBy    string `json:"signed_by"`
		Entries     []entry
	}
	e.must(&idx, "publish", otherLock, hostLock, "--repo", repo, "--key", priv, "--tag", "current", "--tag", "stable", "--json")
	if !idx.Pushed || idx.SignedBy == "" || idx.Ref != repo+"@"+idx.Digest || len(idx.Entries) != 2 || !idx.Entries[0].Pushed || !idx.Entries[1].Pushed {
		t.Fatalf("publish of two locks --json: %+v", idx)
	}
	hostDigest, otherDigest := idx.Entries[1].Digest, idx.Entries[0].Digest
	if idx.Entries[0].Platform != otherPlatform || hostDigest == otherDigest {
		t.Fatalf("entries %+v: want %s first, as given", idx.Entries, otherPlatform)
	}
	if ref := e.must(nil, "publish", hostLock, otherLock, "--repo", repo, "--key", priv, "--tag", "current"); ref != idx.Ref {
		t.Errorf("publishing the locks again (in another order) printed %s, want the same index %s", ref, idx.Ref)
	}

	var pulled struct {
		Digest, Index, Platform string
		Verified                bool
	}
	e.must(&pulled, "pull", repo+":current", "--trust", pub, "--json")
	if pulled.Digest != hostDigest || pulled.Index != idx.Digest || !pulled.Verified {
		t.Errorf("pull of the index: %+v, want the host's entry %s of index %s", pulled, hostDigest, idx.Digest)
	}
	e.must(&pulled, "pull", repo+":stable", "--trust", pub, "--platform", otherPlatform, "--json")
	if pulled.Digest != otherDigest || pulled.Platform != otherPlatform {
		t.Errorf("pull --platform %s: %+v, want %s", otherPlatform, pulled, otherDigest)
	}
	var ver struct {
		Digest, Target string
		Index          struct {
			Digest, Platform string
			Signed           bool
		}
	}
	e.must(&ver, "verify", repo+"@"+idx.Digest, "--trust", pub, "--json")
	if ver.Digest != hostDigest || ver.Index.Digest != idx.Digest || !ver.Index.Signed || !strings.Contains(ver.Target, hostTag) {
		t.Errorf("verify of the index: %+v", ver)
	}
	if _, _, err := e.run("pull", repo+":current", "--trust", pub, "--platform", "linux/amd64/x/y"); err == nil || !strings.Contains(err.Error(), "--platform") {
		t.Errorf("a malformed --platform: %v", err)
	}

	// An index of the other platform and the host's arch with musl lacks this host's.
	e.must(nil, "publish", otherLock, muslLock, "--repo", repo, "--key", priv, "--tag", "elsewhere")
	_, _, err := e.run("pull", repo+":elsewhere", "--trust", pub)
	if err == nil || !strings.Contains(err.Error(), "no entry for the platform linux/") || !strings.Contains(err.Error(), otherPlatform+" ("+otherTag+")") || !strings.Contains(err.Error(), "+musl (musllinux_1_2_") {
		t.Errorf("pull of an index without the host's platform: %v, want the platforms it has", err)
	} else {
		t.Log(err)
	}

	for _, c := range [][]string{
		{"publish", hostLock, otherLock, "--repo", repo, "--key", priv},              // no --tag
		{"publish", hostLock, hostLock, "--repo", repo, "--key", priv, "--tag", "x"}, // one platform twice
	} {
		if _, _, err := e.run(c...); err == nil {
			t.Errorf("pylayer %s succeeded", strings.Join(c, " "))
		}
	}
}
