package cache

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/pylayer/pylayer/oci"
)

// benchWheels is a set shaped like bench/mkwheels': n wheels of files per
// wheel, each a package directory with a few subdirectories, its dist-info and
// a console script.
func benchWheels(n, files int) []wheel {
	ws := make([]wheel, n)
	for i := range ws {
		name := fmt.Sprintf("bench_pkg_%02d", i)
		fs := map[string]string{
			"site-packages/" + name + "-1.0.dist-info/METADATA": "Name: " + name + "\n",
			"site-packages/" + name + "-1.0.dist-info/RECORD":   "",
			"bin/" + name + "*": "#!/bin/sh\n",
		}
		for k := range files {
			fs[fmt.Sprintf("site-packages/%s/sub%d/mod_%04d.py", name, k%8, k)] = strings.Repeat(fmt.Sprintf("x_%d = %d\n", k, i), 200)
		}
		ws[i] = wheel{title: name + "-1.0-py3-none-any.whl", files: fs}
	}
	return ws
}

// BenchmarkInstall is a cold install of 30 wheels of 300 files (9,000 files):
// fetch from memory, verify, unpack, assemble, one syncfs.
func BenchmarkInstall(b *testing.B) {
	s := newStore()
	fx := s.add(artifact(b, "bench", benchWheels(30, 300)...))
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		c := openCache(b)
		b.StartTimer()
		if _, err := c.Install(ctx, fx.md, fx.manifest, s.fetch, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAssemble is the assembly of that layer's root alone, from trees in
// place: the pass over every file that an install pays besides unpacking.
func BenchmarkAssemble(b *testing.B) {
	s := newStore()
	fx := s.add(artifact(b, "bench", benchWheels(30, 300)...))
	ctx := context.Background()
	c := openCache(b)
	if _, err := c.Install(ctx, fx.md, fx.manifest, s.fetch, nil); err != nil {
		b.Fatal(err)
	}
	m, err := oci.ParseManifest(fx.manifest)
	if err != nil {
		b.Fatal(err)
	}
	var built []*layerBuild // removed after the timed runs: see bench/pull.sh on deleting while timing
	defer func() {
		for _, lb := range built {
			lb.abort()
		}
	}()
	b.ResetTimer()
	for range b.N {
		lb, err := c.newLayerBuild(fx.md, m)
		if err != nil {
			b.Fatal(err)
		}
		for i, l := range m.Layers {
			if err := lb.add(ctx, i, c.treeDir(l.Digest.Encoded()), nil); err != nil {
				b.Fatal(err)
			}
		}
		built = append(built, lb)
	}
}
