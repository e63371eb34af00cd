package cache

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"
	"testing"

	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// TestInstallUnpacksOnePerCoreWhileOthersFetch: an install unpacks at most one
// blob per core at a time, and while every slot is busy, its other workers
// fetch the next blobs (they do not wait for a slot to start fetching).
func TestInstallUnpacksOnePerCoreWhileOthersFetch(t *testing.T) {
	cores := runtime.GOMAXPROCS(0)
	ctx := context.Background()
	c := openCache(t, WithParallelism(2*cores))
	s := newStore()
	var wheels []wheel
	for i := range 3 * cores {
		name := fmt.Sprintf("w%02d", i)
		wheels = append(wheels, wheel{name + "-1.0-py3-none-any.whl", map[string]string{"site-packages/" + name + "/__init__.py": name}})
	}
	fx := s.add(artifact(t, "slots", wheels...))
	layers := map[string]bool{}
	for d := range fx.blobs {
		layers[string(d)] = true
	}

	var mu sync.Mutex
	unpacking, most := 0, 0
	gate := make(chan struct{})
	entered := make(chan struct{}, len(wheels))
	fetched := make(chan struct{}, len(wheels))
	old := testHook
	testHook = func(step string) {
		switch step {
		case "unpacking":
			mu.Lock()
			unpacking++
			most = max(most, unpacking)
			mu.Unlock()
			entered <- struct{}{}
			<-gate
		case "unpacked":
			mu.Lock()
			unpacking--
			mu.Unlock()
		}
	}
	t.Cleanup(func() { testHook = old })
	fetch := func(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) {
		if layers[string(d.Digest)] {
			fetched <- struct{}{}
		}
		return s.fetch(ctx, d)
	}

	done := make(chan error, 1)
	go func() {
		_, err := c.Install(ctx, fx.md, fx.manifest, fetch, nil)
		done <- err
	}()
	// Every slot taken and held: the other workers still fetch one blob each.
	for range cores {
		<-entered
	}
	for range 2 * cores {
		<-fetched
	}
	mu.Lock()
	if unpacking != cores {
		t.Errorf("%d blobs unpacking with every slot held, want %d (one per core)", unpacking, cores)
	}
	mu.Unlock()
	close(gate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if most > cores {
		t.Errorf("%d blobs unpacked at once, want at most %d (one per core)", most, cores)
	}
	assertConsistent(t, c)
}

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
