package builder

import (
	"context"
	"fmt"
	"io"

	"github.com/pylayer/pylayer/broker"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/target"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	"github.com/pylayer/pylayer/oci/interp"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// fits checks, with lock.CheckStack (the check run and ensure make), that l can be bound to
// session s: that it fits the session's interpreter (when it has one) and, for an ext
// layer, that it stacks on the session's base. A refusal wraps lock.ErrIncompatible.
func (w *Worker) fits(ctx context.Context, s broker.Session, base, l *lock.Lock) error {
	py, err := w.interpreterTarget(ctx, s.Interpreter)
	if err != nil {
		return err
	}
	stack := []lock.Named{{Name: "the requested " + string(l.Kind) + " layer", Lock: l}}
	if l.Kind == lock.KindExt {
		stack = append([]lock.Named{{Name: "the session's base " + w.cfg.Repo.Name() + "@" + s.Base, Lock: base}}, stack...)
	}
	return lock.CheckStack(py, w.cfg.Repo.Name()+"@"+s.Interpreter, stack)
}

// interpreterTarget reads the target of the interpreter artifact d ("sha256:...") from the
// worker's repository; "" (no interpreter) is nil.
func (w *Worker) interpreterTarget(ctx context.Context, d string) (*target.Target, error) {
	if d == "" {
		return nil, nil
	}
	if t, ok := w.c.targets.Get(d); ok { // an artifact by digest never changes
		return t, nil
	}
	dg, err := digest.Parse(d)
	if err != nil {
		return nil, fmt.Errorf("the session's interpreter %q: %w", d, err)
	}
	raw, err := w.cfg.Repo.Manifest(ctx, v1.Descriptor{Digest: dg})
	if err != nil {
		return nil, unavailable(fmt.Errorf("reading the session's interpreter %s@%s: %w", w.cfg.Repo.Name(), d, err))
	}
	m, err := oci.ParseManifest(raw)
	if err != nil {
		return nil, err
	}
	if m.ArtifactType != oci.ArtifactTypePython || m.Config.Size > interp.MaxConfigBytes {
		return nil, fmt.Errorf("the session's interpreter %s@%s is not an interpreter artifact", w.cfg.Repo.Name(), d)
	}
	rc, err := w.cfg.Repo.Blob(ctx, m.Config)
	if err != nil {
		return nil, unavailable(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, unavailable(err)
	}
	c, err := interp.ParseConfig(b)
	if err != nil {
		return nil, err
	}
	t, err := c.Target()
	if err != nil {
		return nil, err
	}
	w.c.targets.Put(d, &t)
	return &t, nil
}
