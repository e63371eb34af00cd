package build

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/pylayer/pylayer/internal/logctx"
	"github.com/pylayer/pylayer/layers/native"
)

// NativeReport is native.Check of tree t for platform (a lock's target platform), kept
// beside the trees by tree key and allow-list so that a tree is read once: the tree
// never changes under its key. An empty platform checks nothing (nil, nil).
func (b *Builder) NativeReport(ctx context.Context, t Tree, platform string) (*native.Report, error) {
	if platform == "" {
		return nil, nil
	}
	cache := filepath.Join(b.Root, "native", t.Key+"."+native.PolicyName(platform)+".json")
	if data, err := os.ReadFile(cache); err == nil {
		var r native.Report
		if json.Unmarshal(data, &r) == nil {
			r.Platform = platform
			return &r, nil
		}
	}
	r, err := native.Check(ctx, t.Dir, platform)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.Package.Filename, err)
	}
	// A cache: not flushed; a torn file does not decode and is checked again.
	if data, err := json.Marshal(r); err == nil && os.MkdirAll(filepath.Dir(cache), 0o755) == nil {
		if f, err := os.CreateTemp(filepath.Dir(cache), ".tmp-native-"); err == nil {
			_, werr := f.Write(data)
			if cerr := f.Close(); werr == nil && cerr == nil {
				werr = os.Rename(f.Name(), cache)
			}
			if werr != nil {
				os.Remove(f.Name())
			}
		}
	}
	return r, nil
}

// NativeMessage says what a wheel's report found, naming the wheel, e.g.
// "numpy-1.24.2-cp311-cp311-manylinux_2_28_x86_64.whl needs libblas.so.3 (by ...),
// which is neither in the wheel nor on the manylinux_2_28 allow-list"; "" when nothing
// is missing.
func NativeMessage(filename string, r *native.Report) string {
	s := r.Summary()
	if s == "" {
		return ""
	}
	return filename + " " + s
}

// flagNative checks tree t of a build for the lock's platform and, when libraries are
// missing, calls Options.NativeMissing, or logs a warning without one.
func (b *Builder) flagNative(ctx context.Context, t Tree, platform string) error {
	r, err := b.NativeReport(ctx, t, platform)
	if err != nil || r == nil || len(r.Missing) == 0 {
		return err
	}
	if b.Options.NativeMissing != nil {
		return b.Options.NativeMissing(ctx, t, r)
	}
	logctx.From(ctx).Warn(NativeMessage(t.Package.Filename, r))
	return nil
}
