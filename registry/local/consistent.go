package local

import (
	"errors"
	"fmt"

	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/interp"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// ErrInconsistent: a signed manifest contradicts its own config (the lock of a layer, the
// config of an interpreter): a signature over such a manifest vouches for nothing usable.
var ErrInconsistent = errors.New("the signed manifest does not match its own lock")

// CheckConsistent checks that manifest m agrees with config, the blob its Config names (the
// caller has checked the bytes against that digest): for a layer, its key and kind
// annotations are the lock's, and its layer blobs are exactly the lock's wheels, in order,
// by filename and sha256; for an interpreter, its key annotation is the config's and the
// config is valid. verify, pull and run all decide with this one function. Errors wrap
// ErrInconsistent (or the parse error of the config) and name the first difference.
func CheckConsistent(m *v1.Manifest, config []byte) error {
	_, _, err := consistent(m, config)
	return err
}

// consistent is CheckConsistent, returning what it parsed: the lock of a layer, or the
// config of an interpreter, so that a use reads them once (assemble.Check needs them too).
func consistent(m *v1.Manifest, config []byte) (*lock.Lock, *interp.Config, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w (%s): do not use it", ErrInconsistent, fmt.Sprintf(format, args...))
	}
	switch m.ArtifactType {
	case oci.ArtifactTypePython, oci.ArtifactTypeLayer:
		if want := oci.ConfigMediaType(m.ArtifactType); m.Config.MediaType != want {
			return nil, nil, bad("its config is a %q, not a %q", m.Config.MediaType, want)
		}
	default:
		return nil, nil, fmt.Errorf("%w (artifactType %q)", ErrNotPylayer, m.ArtifactType)
	}
	if m.ArtifactType == oci.ArtifactTypePython {
		c, err := interp.ParseConfig(config)
		if err != nil {
			return nil, nil, fmt.Errorf("interpreter config: %w", err)
		}
		if key := interp.KeyOf(config); m.Annotations[oci.AnnotationKey] != key {
			return nil, nil, bad("its key annotation is %q, its config's key is %s", m.Annotations[oci.AnnotationKey], key)
		}
		if k := m.Annotations[oci.AnnotationKind]; k != interp.KindPython {
			return nil, nil, bad("an interpreter whose kind annotation is %q", k)
		}
		return nil, &c, nil
	}
	l, err := lock.Parse(config)
	if err != nil {
		return nil, nil, fmt.Errorf("the layer's lock: %w", err)
	}
	key, err := l.Key()
	if err != nil {
		return nil, nil, fmt.Errorf("the layer's lock: %w", err)
	}
	switch {
	case m.Annotations[oci.AnnotationKey] != key:
		return nil, nil, bad("its key annotation is %q, its lock's key is %s", m.Annotations[oci.AnnotationKey], key)
	case m.Annotations[oci.AnnotationKind] != string(l.Kind):
		return nil, nil, bad("its kind annotation is %q, its lock is a %s lock", m.Annotations[oci.AnnotationKind], l.Kind)
	case len(m.Layers) != len(l.Packages):
		return nil, nil, bad("%d layer blobs for the %d wheels of its lock", len(m.Layers), len(l.Packages))
	}
	for i, ly := range m.Layers {
		p := l.Packages[i]
		if ly.Annotations[oci.AnnotationWheelSHA256] != p.SHA256 || oci.LayerWheel(ly) != p.Filename {
			return nil, nil, bad("layer blob %d is %s (wheel sha256 %s), its lock says %s (%s)", i, oci.LayerWheel(ly), ly.Annotations[oci.AnnotationWheelSHA256], p.Filename, p.SHA256)
		}
	}
	return l, nil, nil
}
