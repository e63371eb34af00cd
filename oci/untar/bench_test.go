package untar

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// BenchmarkExtract: a site-packages-like layer blob, 2,000 files of 4 KiB in 100
// directories, gzip'd, unpacked read-only as the cache does.
func BenchmarkExtract(b *testing.B) {
	var ents []ent
	for i := range 2000 {
		ents = append(ents, reg(fmt.Sprintf("site-packages/pkg%02d/mod%04d.py", i%100, i), strings.Repeat("x = 1\n", 680)))
	}
	blob := gz(b, rawTar(b, ents...))
	b.SetBytes(2000 * 4080)
	base := b.TempDir()
	b.ResetTimer()
	for i := range b.N {
		_, err := Extract(context.Background(), bytes.NewReader(blob), filepath.Join(base, fmt.Sprint(i)), Options{Limits: DefaultLimits(), Gzip: true, ReadOnly: true})
		if err != nil {
			b.Fatal(err)
		}
	}
}
