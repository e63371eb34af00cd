package cache

import (
	"bytes"
	"slices"
	"testing"

	v1 "github.com/opencontainers/image-spec/specs-go/v1"
)

func TestLargestFirst(t *testing.T) {
	for _, tc := range []struct {
		sizes []int64
		want  []int
	}{
		{[]int64{1}, []int{0}},
		{[]int64{1, 3, 2}, []int{1, 2, 0}},
		{[]int64{5, 5, 9, 5}, []int{2, 0, 1, 3}}, // ties keep the manifest's order
	} {
		var layers []v1.Descriptor
		for _, n := range tc.sizes {
			layers = append(layers, v1.Descriptor{Size: n})
		}
		if got := largestFirst(layers); !slices.Equal(got, tc.want) {
			t.Errorf("largestFirst(%v) = %v, want %v", tc.sizes, got, tc.want)
		}
	}
}

// TestBuffersReuse: a buffer put back is the next one got, emptied; past as
// many as the install fetches at once, buffers are dropped.
func TestBuffersReuse(t *testing.T) {
	b := newBuffers(1)
	first := b.get()
	first.WriteString("blob")
	b.put(first)
	b.put(b.get()) // the same one again
	b.put(new(bytes.Buffer))
	got := b.get()
	if got != first || got.Len() != 0 {
		t.Errorf("get = %p (%d bytes), want %p emptied", got, got.Len(), first)
	}
	if again := b.get(); again == first {
		t.Error("one buffer got twice")
	}
}
