package digest

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	godigest "github.com/opencontainers/go-digest"
)

// agree checks that Parse, and for a valid digest Algorithm and Encoded, give on s what
// go-digest gives: the same error (by text) or none.
func agree(t *testing.T, s string) {
	t.Helper()
	d, err := Parse(s)
	gd, gerr := godigest.Parse(s)
	if (err == nil) != (gerr == nil) || err != nil && err.Error() != gerr.Error() {
		t.Fatalf("Parse(%q) = %v, go-digest %v", s, err, gerr)
	}
	if string(d) != string(gd) {
		t.Fatalf("Parse(%q) = %q, go-digest %q", s, d, gd)
	}
	if err == nil && (string(d.Algorithm()) != string(gd.Algorithm()) || d.Encoded() != gd.Encoded()) {
		t.Fatalf("%q: %s %s, go-digest %s %s", s, d.Algorithm(), d.Encoded(), gd.Algorithm(), gd.Encoded())
	}
	a, enc, _ := strings.Cut(s, ":")
	if err, gerr := Algorithm(a).Validate(enc), godigest.Algorithm(a).Validate(enc); (err == nil) != (gerr == nil) || err != nil && err.Error() != gerr.Error() {
		t.Fatalf("Algorithm(%q).Validate(%q) = %v, go-digest %v", a, enc, err, gerr)
	}
}

func TestAgreesWithGoDigest(t *testing.T) {
	h64, h96, h128 := strings.Repeat("a1", 32), strings.Repeat("0f", 48), strings.Repeat("9e", 64)
	for _, s := range []string{
		"sha256:" + h64, "sha384:" + h96, "sha512:" + h128,
		"sha256:" + h64[:63], "sha256:" + h64 + "0", "sha256:" + strings.ToUpper(h64), "sha256:" + h64[:63] + "g",
		"sha512:" + h64, "sha384:" + h128, "sha256:" + h96,
		"", ":", "sha256", "sha256:", ":" + h64, "sha256::" + h64, "SHA256:" + h64,
		"md5:d41d8cd98f00b204e9800998ecf8427e", "blake3:" + h64, "a.b+c_d-e:xyz=", "a..b:x", "a.:x", ".a:x", "a-:x",
		"foo:bar baz", "foo:bar:baz", "foo:bar/baz", "foo:" + "\x00", "sha256:" + h64 + "\n", "sha256 :" + h64,
		"multihash+base58:QmRZxt2b1FVZPNqd8hsiykDL3TdBDeTSPX9Kv46HmX4Gx8",
	} {
		agree(t, s)
	}
	for _, p := range [][]byte{nil, {}, []byte("hello"), bytes.Repeat([]byte{0xff}, 1000)} {
		if d, gd := FromBytes(p), godigest.FromBytes(p); string(d) != string(gd) {
			t.Fatalf("FromBytes(%q) = %s, go-digest %s", p, d, gd)
		}
		if d, gd := FromString(string(p)), godigest.FromString(string(p)); string(d) != string(gd) {
			t.Fatalf("FromString(%q) = %s, go-digest %s", p, d, gd)
		}
		for _, a := range []Algorithm{SHA256, SHA384, SHA512} {
			d, err := a.FromReader(bytes.NewReader(p))
			gd, gerr := godigest.Algorithm(a).FromReader(bytes.NewReader(p))
			if err != nil || gerr != nil || string(d) != string(gd) {
				t.Fatalf("%s.FromReader(%q) = %s %v, go-digest %s %v", a, p, d, err, gd, gerr)
			}
		}
	}
	if _, err := Algorithm("md5").FromReader(strings.NewReader("x")); !errors.Is(err, ErrDigestUnsupported) {
		t.Fatalf("md5 FromReader: %v, want ErrDigestUnsupported", err)
	}
	if d := NewDigestFromBytes(SHA256, []byte{1, 0xab}); d != "sha256:01ab" {
		t.Fatalf("NewDigestFromBytes: %s", d)
	}
}

// The panics of go-digest on a digest without ':' are kept, not turned into wrong answers.
func TestNoSeparatorPanics(t *testing.T) {
	for _, f := range []func(Digest){func(d Digest) { d.Algorithm() }, func(d Digest) { _ = d.Encoded() }} {
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("no panic on a digest without ':'")
				}
			}()
			f("sha256")
		}()
	}
}

func FuzzAgreesWithGoDigest(f *testing.F) {
	f.Add("sha256:" + strings.Repeat("ab", 32))
	f.Add("a.b+c_d-e:xyz=")
	f.Add("sha512:" + strings.Repeat("0", 127) + "G")
	f.Fuzz(func(t *testing.T, s string) { agree(t, s) })
}
