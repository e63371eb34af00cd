package cache

import (
	"bytes"
	"testing"
)

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
