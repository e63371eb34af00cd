package cache

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pylayer/pylayer/oci/digest"
)

// TestPlanGC: the pure half of GC, on roots, references, sizes, ages and budgets.
func TestPlanGC(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(h int) time.Time { return t0.Add(time.Duration(h) * time.Hour) }
	layer := func(hex string, used int, root bool, trees ...string) gcLayer {
		return gcLayer{hex: hex, trees: trees, used: at(used), root: root}
	}
	sizes := map[string]int64{"ta": 100, "tb": 200, "tc": 400, "td": 800, "orphan": 50}
	// A (root) uses ta, tb; B uses tb, tc; C uses tc; D uses td. Total used: 1500.
	base := []gcLayer{
		layer("A", 3, true, "ta", "tb"),
		layer("B", 1, false, "tb", "tc"),
		layer("C", 2, false, "tc"),
		layer("D", 0, false, "td"),
	}
	tests := []struct {
		name     string
		layers   []gcLayer
		sizes    map[string]int64
		maxBytes int64
		layersOut,
		treesOut string
	}{
		{"budget met: only unused trees", base, sizes, 1500, "", "orphan"},
		{"one layer over: the oldest goes", base, sizes, 1499, "D", "orphan td"},
		{"removing D meets the budget exactly", base, sizes, 700, "D", "orphan td"},
		{"B frees nothing (its trees are shared), so C goes too", base, sizes, 699, "D B C", "orphan tc td"},
		{"then the next oldest", base, sizes, 300, "D B C", "orphan tc td"},
		{"zero: every layer but roots", base, sizes, 0, "D B C", "orphan tc td"},
		{"negative: every layer but roots, whatever the size", base, sizes, -1, "D B C", "orphan tc td"},
		{"roots are never removed", []gcLayer{layer("A", 0, true, "ta"), layer("B", 1, true, "tb")}, sizes, -1, "", "orphan tc td"},
		{"ties in age go by digest", []gcLayer{layer("y", 0, false, "ta"), layer("x", 0, false, "tb")}, sizes, 150, "x", "orphan tb tc td"},
		{"an unreadable layer (no trees) is removed like any other", []gcLayer{layer("bad", 0, false), layer("A", 1, true, "ta")}, sizes, -1, "bad", "orphan tb tc td"},
		{"a tree missing from disk counts nothing", []gcLayer{layer("A", 0, false, "gone", "ta")}, map[string]int64{"ta": 100}, 100, "", ""},
		{"empty cache", nil, nil, 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.layers)
			plan := planGC(tt.layers, tt.sizes, tt.maxBytes)
			if got := strings.Join(plan.layers, " "); got != tt.layersOut {
				t.Errorf("layers = %q, want %q", got, tt.layersOut)
			}
			if got := strings.Join(plan.trees, " "); got != tt.treesOut {
				t.Errorf("trees = %q, want %q", got, tt.treesOut)
			}
			for _, l := range tt.layers {
				if l.root && slices.Contains(plan.layers, l.hex) {
					t.Errorf("root %s is in the plan", l.hex)
				}
			}
			// No tree a remaining layer uses is in the plan.
			for _, l := range tt.layers {
				if slices.Contains(plan.layers, l.hex) {
					continue
				}
				for _, tr := range l.trees {
					if slices.Contains(plan.trees, tr) {
						t.Errorf("tree %s of kept layer %s is in the plan", tr, l.hex)
					}
				}
			}
			if !slices.EqualFunc(in, tt.layers, func(a, b gcLayer) bool { return a.hex == b.hex }) {
				t.Error("planGC reordered its input")
			}
		})
	}
}

// TestSweep: the sweep deletes the plan's layers with their admission records and
// the plan's trees, but spares a layer that a sandbox took hold of after the plan
// was made, and the trees it uses.
func TestSweep(t *testing.T) {
	ctx := context.Background()
	c := openCache(t)
	s := newStore()
	A := artifact(t, "A", wheelA)
	B := artifact(t, "B", wheelB)
	installAll(t, c, s, A, B)
	for _, fx := range []fixture{A, B} {
		must(t, c.Admit(ctx, fx.md, Admission{Repository: "oci:/x", Rule: "oci:/x", Unsigned: true}))
	}
	layers, sizes, err := c.gcState(ctx, nil)
	must(t, err)
	plan := planGC(layers, sizes, -1)
	if len(plan.layers) != 2 || len(plan.trees) != 2 {
		t.Fatalf("plan = %+v, want both layers and both trees", plan)
	}
	release, err := c.Hold(ctx, A.md) // after the plan
	must(t, err)
	defer release()
	rep, err := c.sweep(ctx, plan, layers, sizes)
	must(t, err)
	if !slices.Equal(rep.RemovedLayers, []digest.Digest{B.md}) || !slices.Equal(rep.Kept, []digest.Digest{A.md}) {
		t.Errorf("sweep = %+v, want B removed and A kept", rep)
	}
	if len(rep.RemovedTrees) != 1 || rep.RemovedTrees[0] != B.layers[0].Digest || rep.FreedBytes != sizeOf(wheelB) {
		t.Errorf("sweep removed trees %v (%d bytes), want only B's", rep.RemovedTrees, rep.FreedBytes)
	}
	if _, ok := c.Layer(A.md); !ok {
		t.Error("the held layer was removed")
	}
	if got, err := c.Admissions(ctx, A.md); err != nil || len(got) != 1 {
		t.Errorf("admissions of the held layer = %v, %v", got, err)
	}
	if got, _ := c.Admissions(ctx, B.md); len(got) != 0 {
		t.Errorf("admissions of the removed layer stayed: %v", got)
	}
	assertConsistent(t, c)
}
