package assemble

import (
	"reflect"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/layers/lock"
)

// TestSessionRefs: the newest iso layer replaces the base, ext layers follow oldest first,
// and digests become references in the session's repository.
func TestSessionRefs(t *testing.T) {
	const repo = "reg.test/team/pylayer"
	ext := func(ref string) Binding { return Binding{Kind: lock.KindExt, Ref: ref} }
	iso := func(ref string) Binding { return Binding{Kind: lock.KindIso, Ref: ref} }
	for _, c := range []struct {
		name   string
		s      Session
		repo   string
		python string
		layers []string
		err    string
	}{
		{name: "nothing bound", s: Session{ID: "s"}},
		{name: "degraded, base only", s: Session{ID: "s", Base: "sha256:b"}, repo: repo,
			layers: []string{repo + "@sha256:b"}},
		{name: "interpreter and base", s: Session{ID: "s", Interpreter: "sha256:p", Base: "sha256:b"}, repo: repo,
			python: repo + "@sha256:p", layers: []string{repo + "@sha256:b"}},
		{name: "ext layers follow the base, oldest first", s: Session{ID: "s", Base: "sha256:b", Bindings: []Binding{ext("r@e1"), ext("r@e2")}},
			repo: repo, layers: []string{repo + "@sha256:b", "r@e1", "r@e2"}},
		{name: "an iso layer replaces the base", s: Session{ID: "s", Base: "sha256:b", Bindings: []Binding{ext("r@e1"), iso("r@i1"), ext("r@e2")}},
			repo: repo, layers: []string{"r@i1", "r@e1", "r@e2"}},
		{name: "the newest iso layer wins", s: Session{ID: "s", Base: "sha256:b", Bindings: []Binding{iso("r@i1"), iso("r@i2")}},
			repo: repo, layers: []string{"r@i2"}},
		{name: "an iso layer needs no repository for the base", s: Session{ID: "s", Base: "sha256:b", Bindings: []Binding{iso("r@i1")}},
			layers: []string{"r@i1"}},
		{name: "ext without base", s: Session{ID: "s", Bindings: []Binding{ext("r@e1")}}, layers: []string{"r@e1"}},
		{name: "a base needs the repository", s: Session{ID: "s", Base: "sha256:b"}, err: "--repo"},
		{name: "an interpreter needs the repository", s: Session{ID: "s", Interpreter: "sha256:p"}, err: "--repo"},
		{name: "a binding of another kind", s: Session{ID: "s", Bindings: []Binding{{Kind: lock.KindBase, Ref: "r@x"}}}, err: `"base" layer`},
	} {
		t.Run(c.name, func(t *testing.T) {
			python, layers, err := c.s.Refs(c.repo)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Refs: %v, want an error with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if python != c.python || !reflect.DeepEqual(layers, c.layers) {
				t.Errorf("Refs = %q, %q; want %q, %q", python, layers, c.python, c.layers)
			}
		})
	}
}
