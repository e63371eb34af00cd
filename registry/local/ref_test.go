package local

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/oci/digest"
)

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseRef(t *testing.T) {
	abs, _ := filepath.Abs("rel/dir")
	tests := []struct {
		in   string
		want Ref
	}{
		{"127.0.0.1:5000/team/pylayer", Ref{Repo: "127.0.0.1:5000/team/pylayer"}},
		{"127.0.0.1:5000/team/pylayer:base-abc", Ref{Repo: "127.0.0.1:5000/team/pylayer", Tag: "base-abc"}},
		{"registry.example.com/a/b/c@sha256:" + hex64, Ref{Repo: "registry.example.com/a/b/c", Digest: digest.Digest("sha256:" + hex64)}},
		{"localhost/x:t@sha256:" + hex64, Ref{Repo: "localhost/x", Tag: "t", Digest: digest.Digest("sha256:" + hex64)}},
		{"[::1]:5000/team/py_layer.x-y", Ref{Repo: "[::1]:5000/team/py_layer.x-y"}},
		{"reg.example:443/a__b/c--d", Ref{Repo: "reg.example:443/a__b/c--d"}},
		{"oci:/srv/layout", Ref{Layout: "/srv/layout"}},
		{"oci:/srv/layout/:base-k", Ref{Layout: "/srv/layout", Tag: "base-k"}},
		{"oci:/srv/a:b/layout", Ref{Layout: "/srv/a:b/layout"}},
		{"oci:rel/dir@sha256:" + hex64, Ref{Layout: abs, Digest: digest.Digest("sha256:" + hex64)}},
	}
	for _, tc := range tests {
		got, err := ParseRef(tc.in)
		if err != nil {
			t.Errorf("ParseRef(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("ParseRef(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
		if again, err := ParseRef(got.String()); err != nil || again != got {
			t.Errorf("ParseRef(%q.String()) = %+v, %v", tc.in, again, err)
		}
	}
	if r, _ := ParseRef("127.0.0.1:5000/team/pylayer:t"); r.Host() != "127.0.0.1:5000" || r.Path() != "team/pylayer" || r.Name() != "127.0.0.1:5000/team/pylayer" {
		t.Errorf("Host/Path/Name: %q %q %q", r.Host(), r.Path(), r.Name())
	}
}

func TestParseRefErrors(t *testing.T) {
	tests := []struct{ in, msg string }{
		{"", "empty"},
		{"team/pylayer", "not a registry host"},
		{"pylayer", "missing repository path"},
		{"127.0.0.1:5000", "missing repository path"},
		{"127.0.0.1:5000/", "missing repository path"},
		{"https://reg.example/team/x", `drop the "https://"`},
		{"reg.example/Team/x", "lowercase"},
		{"reg.example/team//x", "empty component"},
		{"reg.example/team/x-", "lowercase"},
		{"reg.example/team/x:", "empty tag"},
		{"reg.example/team/x:-bad", "invalid tag"},
		{"reg.example/team/x@sha256:abc", "digest"},
		{"reg.example/team/x@md5:" + hex64[:32], "digest"},
		{"reg.example:0/x", "port"},
		{"reg.example:99999/x", "port"},
		{"reg.example:/x", "empty port"},
		{"-reg.example/x", "not a valid host name"},
		{"[::1/x", "missing ']'"},
		{"[1.2.3.4]:5/x", "not an IPv6"},
		{"reg.example/x y", "whitespace"},
		{"oci:", "missing directory"},
		{"oci::tag", "missing directory"},
		{"oci:/dir:bad tag", "whitespace"},
		{"oci:/srv/a:b/", "contains ':'"},
		{"reg.example/" + strings.Repeat("a/", 130) + "a", "limit is 255"},
	}
	for _, tc := range tests {
		_, err := ParseRef(tc.in)
		if !errors.Is(err, ErrInvalidRef) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ParseRef(%q) = %v, want ErrInvalidRef mentioning %q", tc.in, err, tc.msg)
		}
	}
}

func FuzzParseRef(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1:5000/team/pylayer:base-abc", "oci:/srv/l:t@sha256:" + hex64, "[::1]:5000/a/b",
		"reg.example/a__b/c--d@sha256:" + hex64, "oci:rel", "team/x", "a:b:c/d:e", "oci:/a@b@c", "oci:/x:y/",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := ParseRef(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidRef) {
				t.Fatalf("error does not wrap ErrInvalidRef: %v", err)
			}
			return
		}
		if (r.Repo == "") == (r.Layout == "") {
			t.Fatalf("%q: exactly one of Repo and Layout must be set: %+v", s, r)
		}
		if r.Layout != "" && !filepath.IsAbs(r.Layout) {
			t.Fatalf("%q: layout %q is not absolute", s, r.Layout)
		}
		if r.Repo != "" && (len(r.Repo) > maxRepoName || r.Host() == "" || r.Path() == "") {
			t.Fatalf("%q: bad repository %q", s, r.Repo)
		}
		again, err := ParseRef(r.String())
		if err != nil || again != r {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, r, r.String(), again, err)
		}
	})
}
