package gunzip

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
)

func gz(t testing.TB, level int, data []byte, hdr func(*gzip.Header)) []byte {
	var b bytes.Buffer
	w, err := gzip.NewWriterLevel(&b, level)
	if err != nil {
		t.Fatal(err)
	}
	if hdr != nil {
		hdr(&w.Header)
	}
	if _, err := w.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// sample is compressible bytes, like a tar of source and binaries.
func sample(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	words := []string{"def ", "import ", "return ", "self", "\n    ", "numpy", "(", ")", ":", "\x00\x00\x00\x7fELF"}
	var b bytes.Buffer
	for b.Len() < n {
		if r.IntN(8) == 0 {
			b.WriteByte(byte(r.Uint32()))
		} else {
			b.WriteString(words[r.IntN(len(words))])
		}
	}
	return b.Bytes()[:n]
}

// streamed is what the streaming reader makes of b, the reference Whole must agree with.
func streamed(b []byte) ([]byte, error) {
	r, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(r)
}

func TestWhole(t *testing.T) {
	if !Available {
		t.Skip("built without cgo and -tags libdeflate (make unit): Whole is never ok, and callers stream (make test runs with the tag)")
	}
	data := sample(3<<20, 1)
	for _, level := range []int{gzip.NoCompression, gzip.BestSpeed, gzip.DefaultCompression, gzip.BestCompression} {
		b := gz(t, level, data, nil)
		got, ok := Whole(nil, b, 1<<30)
		if !ok || !bytes.Equal(got, data) {
			t.Fatalf("level %d: Whole = %d bytes, %v; want the %d bytes written", level, len(got), ok, len(data))
		}
		// dst's storage is used when it is large enough.
		buf := make([]byte, 0, len(data)+10)
		if got, ok := Whole(buf, b, 1<<30); !ok || &got[0] != &buf[:1][0] || !bytes.Equal(got, data) {
			t.Fatalf("level %d: Whole did not inflate into dst's storage", level)
		}
	}
	empty := gz(t, gzip.DefaultCompression, nil, nil)
	if got, ok := Whole(nil, empty, 10); !ok || len(got) != 0 {
		t.Fatalf("empty stream: %d bytes, %v", len(got), ok)
	}
}

// TestWholeDeclines: everything but a plain single member of the stated size is
// left to the streaming reader.
func TestWholeDeclines(t *testing.T) {
	data := sample(64<<10, 2)
	b := gz(t, gzip.DefaultCompression, data, nil)
	corrupt := func(f func(c []byte) []byte) []byte { return f(append([]byte(nil), b...)) }
	cases := map[string][]byte{
		"over the limit": nil, // below, with limit len(data)-1
		"named header":   gz(t, gzip.DefaultCompression, data, func(h *gzip.Header) { h.Name = "layer.tar" }),
		"extra field":    gz(t, gzip.DefaultCompression, data, func(h *gzip.Header) { h.Extra = []byte("ab\x02\x00xy") }),
		"two members":    append(append([]byte(nil), b...), gz(t, gzip.DefaultCompression, data, nil)...),
		"trailing bytes": append(append([]byte(nil), b...), 0),
		"bad crc":        corrupt(func(c []byte) []byte { c[len(c)-8] ^= 1; return c }),
		"bad size":       corrupt(func(c []byte) []byte { c[len(c)-4]++; return c }),
		"smaller size":   corrupt(func(c []byte) []byte { c[len(c)-4]--; return c }),
		"truncated":      b[:len(b)-9],
		"bad deflate":    corrupt(func(c []byte) []byte { c[12] ^= 0xff; return c }),
		"not gzip":       data,
		"short":          b[:18],
		"empty":          nil,
		"not deflate":    corrupt(func(c []byte) []byte { c[2] = 7; return c }),
	}
	for name, c := range cases {
		limit := int64(1 << 30)
		if name == "over the limit" {
			c, limit = b, int64(len(data)-1)
		}
		if got, ok := Whole(nil, c, limit); ok {
			t.Errorf("%s: Whole = %d bytes, ok; want it left to the streaming reader", name, len(got))
		}
	}
	if _, ok := Whole(nil, b, int64(len(data))); ok != Available {
		t.Errorf("exactly at the limit: ok = %v, want %v", ok, Available)
	}
}

// raw is the deflate stream inside a gzip member written by gz.
func raw(t testing.TB, level int, data []byte) []byte {
	b := gz(t, level, data, nil)
	return b[10 : len(b)-8]
}

// member wraps a raw deflate stream in a plain gzip header and the trailer of out.
func member(d, out []byte) []byte {
	b := append([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255}, d...)
	b = binary.LittleEndian.AppendUint32(b, crc32.ChecksumIEEE(out))
	return binary.LittleEndian.AppendUint32(b, uint32(len(out)))
}

// FuzzWhole: whatever Whole accepts, the streaming reader accepts with the same
// bytes. A fuzzed gzip stream almost never has a valid CRC, so the input is
// also read as a raw deflate stream and given the trailer of what libdeflate
// (and, separately, the streaming inflater) makes of it. Whole may decline what
// the streaming reader accepts (the caller streams it then); see agree for
// the reverse.
func FuzzWhole(f *testing.F) {
	for i, level := range []int{gzip.DefaultCompression, gzip.BestSpeed, gzip.NoCompression, gzip.HuffmanOnly} {
		f.Add(raw(f, level, sample(1000<<i, uint64(10+i))))
	}
	f.Add(gz(f, gzip.DefaultCompression, sample(10<<10, 3), nil))
	f.Add(gz(f, gzip.BestSpeed, sample(1000, 4), nil))
	f.Add(gz(f, gzip.NoCompression, sample(300, 5), nil))
	f.Add(gz(f, gzip.HuffmanOnly, sample(5000, 6), nil))
	f.Add(gz(f, gzip.DefaultCompression, nil, nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		agree(t, b)
		if out, ok := inflateRaw(b, 1<<20); ok {
			m := member(b, out)
			agree(t, m)
			agreeDeflated(t, b, out)
			agree(t, append(append(m, gz(t, gzip.BestSpeed, out[:len(out)/2], nil)...), m...))
		}
		// A trailer for what the streaming inflater makes of it, too (it reads from a
		// ByteReader no further than the stream's end).
		br := bytes.NewReader(b)
		if out, err := io.ReadAll(io.LimitReader(flate.NewReader(br), 1<<20+1)); err == nil && len(out) <= 1<<20 && br.Len() == 0 {
			agree(t, member(b, out))
		}
	})
}

// agree fails unless what Whole accepts the streaming reader accepts with the
// same bytes, or refuses for one reason only: libdeflate ignores a run of code
// lengths that overruns a dynamic block's count (its decompress_template.h says
// so), where zlib and Go refuse it as corrupt. That is the one leniency allowed:
// a flate.CorruptInputError, never a header, CRC-32 or size the two disagree on.
func agree(t *testing.T, b []byte) {
	agreeMembers(t, b)
	got, ok := Whole(nil, b, 1<<20)
	if !ok {
		return
	}
	sameAsStreamed(t, "Whole", b, got)
}

// sameAsStreamed fails unless the streaming reader makes got of b, or refuses b for the
// one leniency allowed (see agree).
func sameAsStreamed(t *testing.T, who string, b, got []byte) {
	t.Helper()
	want, err := streamed(b)
	var corrupt flate.CorruptInputError
	if errors.As(err, &corrupt) {
		return
	}
	if err != nil {
		t.Fatalf("%s inflated %d bytes of a stream the streaming reader refuses: %v", who, len(got), err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s made %d bytes, the streaming reader %d, and they differ", who, len(got), len(want))
	}
}

// agreeDeflated is agree for Deflated, given what libdeflate made of the raw stream d: it
// is those bytes, exactly, or nothing; the streaming reader makes the same of d (with the
// one leniency); and another size or CRC-32 is declined.
func agreeDeflated(t *testing.T, d, out []byte) {
	t.Helper()
	if len(out) == 0 {
		return
	}
	crc := crc32.ChecksumIEEE(out)
	dst := make([]byte, len(out))
	if !Deflated(dst, d, crc) {
		t.Fatalf("Deflated declined a stream libdeflate inflates to %d bytes", len(out))
	}
	if !bytes.Equal(dst, out) {
		t.Fatal("Deflated made other bytes than libdeflate's one-shot inflate")
	}
	sameAsStreamed(t, "Deflated", member(d, out), dst)
	if Deflated(dst, d, crc^1) {
		t.Fatal("Deflated accepted another CRC-32")
	}
	if Deflated(make([]byte, len(out)+1), d, crc) || len(out) > 1 && Deflated(dst[:len(out)-1], d, crc) {
		t.Fatal("Deflated accepted another size")
	}
}

// agreeMembers is agree for NewMembers: what it reads without declining, the streaming
// reader reads too, with the same bytes, with the same one leniency.
func agreeMembers(t *testing.T, b []byte) {
	m, ok := NewMembers(b, make([]byte, 1<<20))
	if !ok {
		return
	}
	got, err := io.ReadAll(m)
	if err != nil {
		if !errors.Is(err, ErrDeclined) || !m.Declined() {
			t.Fatalf("Members: %v, want only ErrDeclined", err)
		}
		return
	}
	sameAsStreamed(t, "Members", b, got)
}

// TestMembers: a stream of members is read whole, one member at a time, into a buffer
// no larger than its largest member; what it cannot read so it declines.
func TestMembers(t *testing.T) {
	if !Available {
		t.Skip("built without cgo and -tags libdeflate (make unit): NewMembers is never ok, and callers stream (make test runs with the tag)")
	}
	const size = 64 << 10
	data := sample(5*size/2, 7)
	var b []byte
	for i := 0; i < len(data); i += size {
		b = append(b, gz(t, gzip.DefaultCompression, data[i:min(i+size, len(data))], nil)...)
	}
	b = append(b, gz(t, gzip.DefaultCompression, nil, nil)...) // an empty member is read past
	m, ok := NewMembers(b, make([]byte, size))
	if !ok {
		t.Fatal("NewMembers declined members of the buffer's size")
	}
	got, err := io.ReadAll(m)
	if err != nil || !bytes.Equal(got, data) || m.Declined() {
		t.Fatalf("Members read %d bytes, %v; want the %d bytes written", len(got), err, len(data))
	}
	agree(t, b)

	big := gz(t, gzip.DefaultCompression, sample(size+1, 8), nil)
	small := gz(t, gzip.DefaultCompression, data[:10], nil)
	declines := map[string][]byte{
		"a larger member first": append(append([]byte(nil), big...), small...),
		"a larger member later": append(append([]byte(nil), small...), append(big, small...)...),
		"trailing bytes":        append(append([]byte(nil), small...), append(small, 0)...),
		"a named header later":  append(append([]byte(nil), small...), gz(t, gzip.DefaultCompression, data[:10], func(h *gzip.Header) { h.Name = "x" })...),
		"bad crc":               append(append([]byte(nil), small...), func() []byte { c := append([]byte(nil), small...); c[len(c)-8] ^= 1; return c }()...),
	}
	for name, c := range declines {
		m, ok := NewMembers(c, make([]byte, size))
		if !ok {
			t.Fatalf("%s: NewMembers declined before reading", name)
		}
		if _, err := io.ReadAll(m); !errors.Is(err, ErrDeclined) || !m.Declined() {
			t.Errorf("%s: err = %v, want ErrDeclined", name, err)
		}
	}
	for name, c := range map[string][]byte{"its trailer states more": big, "not gzip": data, "empty": nil} {
		if _, ok := NewMembers(c, make([]byte, size)); ok {
			t.Errorf("%s: NewMembers ok, want it left to the streaming reader", name)
		}
	}
}

// TestWholeLeniency pins the one difference agree allows: a stream whose code
// lengths overrun their count (found by FuzzWhole), which zlib refuses as
// "invalid bit length repeat".
func TestWholeLeniency(t *testing.T) {
	d := []byte("dA!N,A\x10m\xb7ɺ/\xbfkY\xa5q\xa50\xbbA\xacB\x03!0\xd9$\x84]2Î@\x90u8n\x80\xe2\x04'\x80\x03 .\x00Xc\xe0\x04\b*o^\xf5\xf4.7X00000000710\xfd\x0e0")
	if _, err := io.ReadAll(flate.NewReader(bytes.NewReader(d))); err == nil {
		t.Fatal("the streaming inflater reads the overrunning stream")
	}
	out, ok := inflateRaw(d, 1<<20)
	if ok != Available {
		t.Fatalf("libdeflate reads the overrunning stream: %v, want %v", ok, Available)
	}
	if Available {
		agree(t, member(d, out))
	}
}
