package assemble

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/oci"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// Session is what a broker session is bound to, as the broker records it.
type Session struct {
	ID          string
	Interpreter string    // digest, or "" (degraded mode)
	Base        string    // digest, or ""
	Bindings    []Binding // oldest first
}

// Binding is one layer bound to a session.
type Binding struct {
	Kind lock.Kind // ext or iso
	Ref  string    // REPO@DIGEST
}

// Refs returns the references a sandbox of s runs on: the interpreter, then the layers in
// mount order. The newest iso binding replaces the base; ext bindings follow, oldest
// first. The interpreter and base are digests in repo, which must be given when s has
// either.
func (s Session) Refs(repo string) (python string, layers []string, err error) {
	byDigest := func(d string) (string, error) {
		if repo == "" {
			return "", fmt.Errorf("session %s is bound to %s: give its repository with --repo (or PYLAYER_REPO)", s.ID, d)
		}
		return repo + "@" + d, nil
	}
	if s.Interpreter != "" {
		if python, err = byDigest(s.Interpreter); err != nil {
			return "", nil, err
		}
	}
	var iso string
	var ext []string
	for _, b := range s.Bindings {
		switch b.Kind {
		case lock.KindIso:
			iso = b.Ref // the newest isolated layer replaces the base
		case lock.KindExt:
			ext = append(ext, b.Ref)
		default:
			return "", nil, fmt.Errorf("session %s: binding %s is a %q layer, want ext or iso", s.ID, b.Ref, b.Kind)
		}
	}
	switch {
	case iso != "":
		layers = append(layers, iso)
	case s.Base != "":
		ref, err := byDigest(s.Base)
		if err != nil {
			return "", nil, err
		}
		layers = append(layers, ref)
	}
	return python, append(layers, ext...), nil
}

// KindOf reads the kind of a layer installed in the host cache from the manifest the
// cache keeps beside its root.
func KindOf(root string) (lock.Kind, error) {
	b, err := os.ReadFile(filepath.Join(root, ".pylayer", "manifest.json"))
	if err != nil {
		return "", fmt.Errorf("layer %s: %w", root, err)
	}
	var m v1.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("layer %s: manifest: %w", root, err)
	}
	if m.ArtifactType == oci.ArtifactTypePython {
		return lock.KindPython, nil
	}
	k := m.Annotations[oci.AnnotationKind]
	if k == "" {
		return "", errors.New("layer " + root + " has no kind annotation")
	}
	return lock.Kind(k), nil
}
