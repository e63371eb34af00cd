package build

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/pylayer/pylayer/layers/index"
	"github.com/pylayer/pylayer/layers/lock"
	"github.com/pylayer/pylayer/layers/native"
	"github.com/pylayer/pylayer/test/fixture"
)

// nativeSetup serves two wheels: "clean" (pure Python) and "needy", whose extension
// module is the host's libssl: it needs libcrypto.so.3, which it does not vendor.
func nativeSetup(t *testing.T) (*index.Client, *lock.Lock) {
	t.Helper()
	needy, err := fixture.NeedyWheel(t.Context(), "needy", "2.0")
	if err != nil {
		t.Fatal(err)
	}
	return servedLock(t, []fixture.Wheel{
		{Name: "clean", Version: "1.0"},
		needy,
	})
}

// TestEachTreeFlagsNative: the tree that needs a library it does not vendor is handed
// to NativeMissing with the soname and file named, on a fresh build and again from the
// cache; the clean one is not; NativeMissing's error fails the build.
func TestEachTreeFlagsNative(t *testing.T) {
	c, l := nativeSetup(t)
	ctx := context.Background()
	b := &Builder{Root: t.TempDir(), Fetcher: c}
	var mu sync.Mutex
	var got []string
	b.Options.NativeMissing = func(_ context.Context, tr Tree, r *native.Report) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, NativeMessage(tr.Package.Filename, r))
		if want := []string{"libcrypto.so.3"}; !slices.Equal(r.Sonames(), want) {
			t.Errorf("missing %q, want %q", r.Sonames(), want)
		}
		if want := []string{"site-packages/needy/_ext.so"}; !slices.Equal(r.Missing[0].Files, want) {
			t.Errorf("files %q, want %q", r.Missing[0].Files, want)
		}
		return nil
	}
	want := "needy-2.0-py3-none-any.whl needs libcrypto.so.3 (by site-packages/needy/_ext.so), which is neither in the wheel nor on the manylinux_2_28 allow-list"
	for round := range 2 { // installed, then cached (tree and report)
		got = nil
		if err := b.EachTree(ctx, l, func(context.Context, int, Tree) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0] != want {
			t.Fatalf("round %d: flagged %q, want [%q]", round, got, want)
		}
	}
	if ms, _ := filepath.Glob(filepath.Join(b.Root, "native", "*.manylinux_2_28.json")); len(ms) != 2 {
		t.Errorf("cached reports %q, want one per tree", ms)
	}

	refuse := errors.New("refused by policy")
	b2 := &Builder{Root: t.TempDir(), Fetcher: c, Options: Options{NativeMissing: func(_ context.Context, tr Tree, r *native.Report) error {
		return fmt.Errorf("%s: %w", NativeMessage(tr.Package.Filename, r), refuse)
	}}}
	err := b2.EachTree(ctx, l, func(context.Context, int, Tree) error { return nil })
	if !errors.Is(err, refuse) || !strings.Contains(err.Error(), "libcrypto.so.3") {
		t.Fatalf("EachTree with a refusing NativeMissing: %v, want the refusal naming libcrypto.so.3", err)
	}
}
