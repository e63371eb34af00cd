package index

import (
	"archive/zip"
	"bytes"
	"compress/flate"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"strings"
	"testing"
)

// zmember is one member of a zip that zipSpec writes byte by byte, so that tests can
// make every field what they want.
type zmember struct {
	name       string
	data       []byte
	deflate    bool
	desc       bool   // a data descriptor (flag bit 3) after the data
	descNoSig  bool   // and without its optional signature
	localName  string // the local header's name, when not name
	localExtra []byte
	method     *uint16 // overrides the method both headers give
	flags      uint16  // or-ed into both headers' flags
	crc        *uint32 // overrides the CRC the central directory gives
}

type zipSpec struct {
	members []zmember
	zip64   bool // zip64 end records, and zip64 extra fields for every member's sizes and offset
	comment string
}

// zipLayout says where zipSpec put things.
type zipLayout struct {
	local   []int // local header offsets
	cd      int   // central directory start
	cdEntry []int // central directory header offsets
	z64     int   // zip64 end record (-1 without)
	eocd    int
}

func le(b *bytes.Buffer, vs ...any) {
	for _, v := range vs {
		if err := binary.Write(b, binary.LittleEndian, v); err != nil {
			panic(err)
		}
	}
}

func deflateBytes(data []byte) []byte {
	var b bytes.Buffer
	w, _ := flate.NewWriter(&b, flate.BestCompression)
	w.Write(data)
	w.Close()
	return b.Bytes()
}

func (s zipSpec) build() ([]byte, zipLayout) {
	var out, cd bytes.Buffer
	lay := zipLayout{z64: -1}
	for _, m := range s.members {
		comp, method := m.data, uint16(methodStore)
		if m.deflate {
			comp, method = deflateBytes(m.data), methodDeflate
		}
		if m.method != nil {
			method = *m.method
		}
		crc := crc32.ChecksumIEEE(m.data)
		flags := m.flags
		if m.desc {
			flags |= flagDataDescriptor
		}
		lname := m.name
		if m.localName != "" {
			lname = m.localName
		}
		off := out.Len()
		lay.local = append(lay.local, off)
		le(&out, uint32(localHeaderSig), uint16(20), flags, method, uint16(0), uint16(0))
		if m.desc {
			le(&out, uint32(0), uint32(0), uint32(0))
		} else {
			le(&out, crc, uint32(len(comp)), uint32(len(m.data)))
		}
		le(&out, uint16(len(lname)), uint16(len(m.localExtra)))
		out.WriteString(lname)
		out.Write(m.localExtra)
		out.Write(comp)
		if m.desc && !m.descNoSig {
			le(&out, uint32(dataDescSig))
		}
		if m.desc {
			le(&out, crc, uint32(len(comp)), uint32(len(m.data)))
		}
		if m.crc != nil {
			crc = *m.crc
		}
		csize, usize, off32 := uint32(len(comp)), uint32(len(m.data)), uint32(off)
		var extra bytes.Buffer
		if s.zip64 {
			csize, usize, off32 = 0xffffffff, 0xffffffff, 0xffffffff
			le(&extra, uint16(zip64ExtraID), uint16(24), uint64(len(m.data)), uint64(len(comp)), uint64(off))
		}
		lay.cdEntry = append(lay.cdEntry, cd.Len())
		le(&cd, uint32(cdHeaderSig), uint16(45), uint16(20), flags, method, uint16(0), uint16(0), crc, csize, usize,
			uint16(len(m.name)), uint16(extra.Len()), uint16(0), uint16(0), uint16(0), uint32(0), off32)
		cd.WriteString(m.name)
		cd.Write(extra.Bytes())
	}
	lay.cd = out.Len()
	for i := range lay.cdEntry {
		lay.cdEntry[i] += lay.cd
	}
	out.Write(cd.Bytes())
	n := len(s.members)
	if s.zip64 {
		lay.z64 = out.Len()
		le(&out, uint32(z64EOCDSig), uint64(44), uint16(45), uint16(45), uint32(0), uint32(0), uint64(n), uint64(n), uint64(cd.Len()), uint64(lay.cd))
		le(&out, uint32(z64LocSig), uint32(0), uint64(lay.z64), uint32(1))
		lay.eocd = out.Len()
		le(&out, uint32(eocdSig), uint16(0), uint16(0), uint16(0xffff), uint16(0xffff), uint32(0xffffffff), uint32(0xffffffff), uint16(len(s.comment)))
	} else {
		lay.eocd = out.Len()
		le(&out, uint32(eocdSig), uint16(0), uint16(0), uint16(n), uint16(n), uint32(cd.Len()), uint32(lay.cd), uint16(len(s.comment)))
	}
	out.WriteString(s.comment)
	return out.Bytes(), lay
}

const testMetadata = "Metadata-Version: 2.1\nName: demo\nVersion: 1.0\nRequires-Dist: other>=1\n\nA long description. "

// bigMembers are n pseudo-random members (incompressible) of size bytes each.
func bigMembers(n, size int) []zmember {
	r := rand.New(rand.NewPCG(1, 2))
	var ms []zmember
	for i := range n {
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(r.Uint32())
		}
		ms = append(ms, zmember{name: fmt.Sprintf("demo/mod%03d.py", i), data: b, deflate: i%2 == 0})
	}
	return ms
}

func metaMember(deflate, desc bool) zmember {
	return zmember{name: "demo-1.0.dist-info/METADATA", data: []byte(strings.Repeat(testMetadata, 40)), deflate: deflate, desc: desc}
}

// viewOf serves data through a zipView whose first tail is its last tail bytes, counting
// the fetches.
func viewOf(data []byte, tail int64, fetches *int) *zipView {
	size := int64(len(data))
	start := size - min(tail, size)
	return &zipView{size: size, start: start, tail: bytes.Clone(data[start:]), budget: 16 << 20,
		fetch: func(_ context.Context, off, end int64) ([]byte, error) {
			*fetches++
			return bytes.Clone(data[off:end]), nil
		}}
}

// wholeMetadata is what Metadata reads from a downloaded wheel: archive/zip over every byte.
func wholeMetadata(data []byte, limit int64) ([]byte, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, err
	}
	return wheelMetadata(zr, limit)
}

// writerZip is a zip that archive/zip writes (deflate or store, data descriptors).
func writerZip(t testing.TB, method uint16, comment string, size int) []byte {
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, m := range append(bigMembers(3, size), metaMember(false, false)) {
		w, err := zw.CreateHeader(&zip.FileHeader{Name: m.name, Method: method})
		if err != nil {
			t.Fatal(err)
		}
		w.Write(m.data)
	}
	zw.SetComment(comment)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestZipMetadata: the range reader returns the very bytes archive/zip reads from the whole
// file, for every layout it accepts, and fetches only what it needs.
func TestZipMetadata(t *testing.T) {
	// a local extra field of 2812 bytes, longer than the slack a member read asks for
	long := zmember{name: "demo-1.0.dist-info/METADATA", data: []byte(testMetadata), localExtra: append([]byte{0xee, 0xfe, 0xfc, 0x0a}, make([]byte, 0x0afc)...)}
	noSig := metaMember(true, true)
	noSig.descNoSig = true
	cases := []struct {
		name       string
		zip        []byte
		tail       int64
		maxFetches int
	}{
		{"archive/zip writer, deflate", writerZip(t, zip.Deflate, "", 5000), 64 << 10, 0},
		{"archive/zip writer, stored, comment", writerZip(t, zip.Store, "a comment", 5000), 64 << 10, 0},
		{"a real-looking wheel", wheelSpec{name: "demo_pkg", version: "1.0"}.bytes(t), 64 << 10, 0},
		{"METADATA first, big wheel", first(zipSpec{members: append([]zmember{metaMember(true, false)}, bigMembers(20, 8000)...)}.build()), 4 << 10, 1},
		{"METADATA last, the tail holds it", first(zipSpec{members: append(bigMembers(20, 8000), metaMember(true, true))}.build()), 8 << 10, 0},
		{"directory longer than the tail", first(zipSpec{members: append(bigMembers(1100, 10), metaMember(false, false))}.build()), 1 << 10, 2},
		{"tail shorter than the end record", first(zipSpec{members: append(bigMembers(5, 100), metaMember(true, false))}.build()), 10, 1},
		{"zip64", first(zipSpec{zip64: true, members: append(bigMembers(20, 8000), metaMember(true, false))}.build()), 1 << 10, 2},
		{"zip64, end records outside the tail", first(zipSpec{zip64: true, members: append(bigMembers(40, 100), metaMember(true, false))}.build()), 30, 4},
		{"local extra longer than the slack", first(zipSpec{members: append([]zmember{long}, bigMembers(20, 8000)...)}.build()), 1 << 10, 3},
		{"data descriptor without signature", first(zipSpec{members: append(bigMembers(2, 100), noSig)}.build()), 1 << 20, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, err := wholeMetadata(tc.zip, 1<<20)
			if err != nil {
				t.Fatalf("archive/zip: %v", err)
			}
			fetches := 0
			got, err := zipMetadata(context.Background(), viewOf(tc.zip, tc.tail, &fetches), 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("got %d bytes %.40q, archive/zip %d bytes %.40q", len(got), got, len(want), want)
			}
			if fetches > tc.maxFetches {
				t.Errorf("%d fetches after the tail, want at most %d", fetches, tc.maxFetches)
			}
		})
	}
}

func first[A, B any](a A, _ B) A { return a }

// TestZipMetadataRefuses: every zip the range reader does not accept is errNoRangeRead
// with a message that says why (the caller then downloads the whole file); what the whole
// file would say of its contents (no METADATA, two, one too large) it says the same way.
func TestZipMetadataRefuses(t *testing.T) {
	u16 := func(v uint16) *uint16 { return &v }
	u32 := func(v uint32) *uint32 { return &v }
	base := zipSpec{members: append(bigMembers(3, 2000), metaMember(true, false))}
	patch := func(s zipSpec, f func(b []byte, l zipLayout) []byte) []byte {
		b, l := s.build()
		return f(b, l)
	}
	put16 := func(b []byte, at int, v uint16) []byte { binary.LittleEndian.PutUint16(b[at:], v); return b }
	put32 := func(b []byte, at int, v uint32) []byte { binary.LittleEndian.PutUint32(b[at:], v); return b }
	put64 := func(b []byte, at int, v uint64) []byte { binary.LittleEndian.PutUint64(b[at:], v); return b }
	withMeta := func(m zmember) zipSpec { return zipSpec{members: append(bigMembers(3, 2000), m)} }
	meta := metaMember(true, false)
	cases := []struct {
		name    string
		zip     []byte
		content bool // a conclusion about the contents, not errNoRangeRead
		want    string
	}{
		{"not a zip", bytes.Repeat([]byte("x"), 5000), false, "no end of central directory"},
		{"trailing bytes", append(first(base.build()), "junk"...), false, "comment"},
		{"split over disks", patch(base, func(b []byte, l zipLayout) []byte { return put16(b, l.eocd+4, 1) }), false, "several disks"},
		{"directory offset off by one", patch(base, func(b []byte, l zipLayout) []byte { return put32(b, l.eocd+16, uint32(l.cd+1)) }), false, "does not end where"},
		{"directory size over the cap", patch(base, func(b []byte, l zipLayout) []byte { return put32(b, l.eocd+12, 1<<30) }), false, "cap"},
		{"too many members", patch(base, func(b []byte, l zipLayout) []byte { b = put16(b, l.eocd+8, 9000); return put16(b, l.eocd+10, 9000) }), false, "cannot fit"},
		{"fewer members than headers", patch(base, func(b []byte, l zipLayout) []byte { b = put16(b, l.eocd+8, 3); return put16(b, l.eocd+10, 3) }), false, "left in the central directory"},
		{"bad directory header", patch(base, func(b []byte, l zipLayout) []byte { b[l.cdEntry[1]] ^= 1; return b }), false, "no header"},
		{"directory name runs past its end", patch(base, func(b []byte, l zipLayout) []byte { return put16(b, l.cdEntry[3]+28, 5000) }), false, "runs past"},
		{"bzip2", first(withMeta(zmember{name: meta.name, data: meta.data, method: u16(12)}).build()), false, "method 12"},
		{"encrypted", first(withMeta(zmember{name: meta.name, data: meta.data, flags: flagEncrypted}).build()), false, "encrypted"},
		{"CRC", first(withMeta(zmember{name: meta.name, data: meta.data, deflate: true, crc: u32(7)}).build()), false, "CRC"},
		{"descriptor CRC", first(withMeta(zmember{name: meta.name, data: meta.data, desc: true, crc: u32(7)}).build()), false, "descriptor"},
		{"local header names another file", first(withMeta(zmember{name: meta.name, data: meta.data, localName: "demo-1.0.dist-info/METADATX"}).build()), false, "local header names"},
		{"no local header", patch(base, func(b []byte, l zipLayout) []byte { b[l.local[3]] ^= 1; return b }), false, "no local header"},
		{"stored sizes differ", patch(base, func(b []byte, l zipLayout) []byte {
			return put16(b, l.cdEntry[3]+10, methodStore) // while the data is deflated
		}), false, "sizes differ"},
		{"data past the directory", patch(base, func(b []byte, l zipLayout) []byte { return put32(b, l.cdEntry[3]+42, uint32(l.cd-10)) }), false, "before the central directory"},
		{"uncompressed size wrong", patch(base, func(b []byte, l zipLayout) []byte { return put32(b, l.cdEntry[3]+24, uint32(len(meta.data)+1)) }), false, "the directory says"},
		{"zip64 locator points past itself", patch(zipSpec{zip64: true, members: base.members}, func(b []byte, l zipLayout) []byte { return put64(b, l.eocd-20+8, uint64(l.eocd)) }), false, "does not fit before its locator"},
		{"zip64 record missing", patch(zipSpec{zip64: true, members: base.members}, func(b []byte, l zipLayout) []byte { b[l.z64] ^= 1; return b }), false, "no zip64 end record"},
		{"zip64 extra missing", patch(zipSpec{zip64: true, members: base.members}, func(b []byte, l zipLayout) []byte {
			return put16(b, l.cdEntry[0]+46+len(base.members[0].name), zip64ExtraID+1)
		}), false, "without a zip64 extra"},
		{"zip64 extra too short", patch(zipSpec{zip64: true, members: base.members}, func(b []byte, l zipLayout) []byte { return put16(b, l.cdEntry[0]+46+len(base.members[0].name)+2, 4) }), false, "too short"},
		{"no METADATA", first(zipSpec{members: bigMembers(3, 100)}.build()), true, "wheel has no .dist-info/METADATA"},
		{"two METADATA", first(zipSpec{members: []zmember{meta, {name: "other-1.0.dist-info/METADATA", data: []byte("x")}}}.build()), true, "more than one"},
		{"METADATA over the cap", first(withMeta(zmember{name: meta.name, data: bytes.Repeat([]byte("x"), 3<<20), deflate: true}).build()), true, "over 1048576 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fetches := 0
			_, err := zipMetadata(context.Background(), viewOf(tc.zip, 1<<10, &fetches), 1<<20)
			if err == nil {
				t.Fatal("no error")
			}
			if errors.Is(err, errNoRangeRead) == tc.content {
				t.Errorf("error %q: errNoRangeRead is %v, want %v", err, !tc.content, !tc.content)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if _, werr := wholeMetadata(tc.zip, 1<<20); tc.content && werr == nil {
				t.Errorf("archive/zip reads the METADATA of a zip the range reader says %q of", err)
			}
		})
	}
}

// FuzzZipMetadata checks the range reader against archive/zip reading the whole file:
// METADATA it returns is the very bytes archive/zip returns; a conclusion about the
// contents it draws (no METADATA, two, too large) archive/zip draws too; anything else is
// errNoRangeRead. It never fetches more than a few ranges.
func FuzzZipMetadata(f *testing.F) {
	seeds := [][]byte{
		writerZip(f, zip.Deflate, "", 40),
		writerZip(f, zip.Store, "comment", 40),
		wheelSpec{name: "demo_pkg", version: "1.0"}.bytes(f),
		first(zipSpec{members: []zmember{metaMember(true, true)}}.build()),
		first(zipSpec{members: []zmember{metaMember(false, false), {name: "x/y.py", data: []byte("pass")}}}.build()),
		first(zipSpec{zip64: true, members: []zmember{metaMember(true, false)}}.build()),
		first(zipSpec{zip64: true, members: []zmember{{name: "a.dist-info/METADATA", data: []byte("Name: a")}}, comment: "zz"}.build()),
		first(zipSpec{members: []zmember{{name: "a.dist-info/METADATA", data: []byte("Name: a"), localExtra: []byte{1, 0, 2, 0, 9, 9}}}}.build()),
		{},
		[]byte("PK\x05\x06" + strings.Repeat("\x00", 18)),
	}
	for _, s := range seeds {
		for _, tail := range []uint32{1 << 20, 64, 0} {
			f.Add(s, tail)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte, tail uint32) {
		const limit = 1 << 16
		fetches := 0
		v := viewOf(data, int64(tail), &fetches)
		v.budget = 4 << 20
		md, err := zipMetadata(context.Background(), v, limit)
		if fetches > 5 {
			t.Fatalf("%d fetches", fetches)
		}
		whole, werr := wholeMetadata(data, limit)
		switch {
		case err == nil && werr != nil:
			t.Fatalf("the range reader read %q where archive/zip says %v", md, werr)
		case err == nil && !bytes.Equal(md, whole):
			t.Fatalf("the range reader read %q, archive/zip %q", md, whole)
		case err != nil && !errors.Is(err, errNoRangeRead) && werr == nil:
			t.Fatalf("the range reader says %v, archive/zip reads %q", err, whole)
		}
	})
}
