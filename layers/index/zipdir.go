package index

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Reading one member of a remote zip file through ranges of it, as uv does: the end of
// central directory record (EOCD, with the zip64 records when it points to them), the
// central directory, then the one member's local header and data.
//
// The reader is stricter than archive/zip: whatever it accepts, archive/zip reads the same
// way from the whole file (the fuzz test checks this), and whatever it does not accept it
// reports as errNoRangeRead, on which the caller downloads the whole file, checks its
// hash and reads it with archive/zip. So a wheel's METADATA is the same bytes whichever
// way it was read.

const (
	eocdLen        = 22
	eocdSig        = 0x06054b50
	maxCommentLen  = 0xffff
	z64LocLen      = 20
	z64LocSig      = 0x07064b50
	z64EOCDLen     = 56
	z64EOCDSig     = 0x06064b50
	cdHeaderLen    = 46
	cdHeaderSig    = 0x02014b50
	localHeaderLen = 30
	localHeaderSig = 0x04034b50
	dataDescSig    = 0x08074b50
	zip64ExtraID   = 0x0001

	methodStore   = 0
	methodDeflate = 8

	flagEncrypted      = 0x1
	flagDataDescriptor = 0x8

	// localSlack is how many bytes of a local header's extra field a member read asks
	// for up front; a longer extra field costs one more request.
	localSlack = 1 << 10
)

// errNoRangeRead marks a file whose METADATA cannot be read through ranges: the server
// does not answer them properly, or the zip's structure is one this reader does not
// accept. The caller then downloads the whole file.
var errNoRangeRead = errors.New("cannot read by range")

func noRange(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errNoRangeRead}, args...)...)
}

// zipView holds bytes [start, size) of a zip file and fetches more on demand.
type zipView struct {
	size  int64
	start int64
	tail  []byte
	// fetch returns exactly bytes [off, end) of the file.
	fetch func(ctx context.Context, off, end int64) ([]byte, error)
	// budget is how many more bytes fetch may be asked for.
	budget int64
}

// read returns bytes [off, end) of the file. A range that reaches into the tail extends
// the tail backwards; one wholly before it is fetched on its own.
func (v *zipView) read(ctx context.Context, off, end int64) ([]byte, error) {
	if off < 0 || end < off || end > v.size {
		return nil, noRange("bytes %d-%d are outside a %d-byte file", off, end, v.size)
	}
	if off >= v.start {
		return v.tail[off-v.start : end-v.start], nil
	}
	upto := min(end, v.start)
	if upto-off > v.budget {
		return nil, noRange("reading %d more bytes would pass the cap on what a METADATA read may fetch", upto-off)
	}
	v.budget -= upto - off
	b, err := v.fetch(ctx, off, upto)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != upto-off {
		return nil, noRange("asked for %d bytes at %d, got %d", upto-off, off, len(b))
	}
	if end <= v.start {
		return b, nil
	}
	v.tail = append(b, v.tail...)
	v.start = off
	return v.tail[:end-off], nil
}

// zipEntry is what the central directory says of one member.
type zipEntry struct {
	name          string
	flags, method uint16
	crc           uint32
	csize, usize  uint64
	offset        int64 // of the local header
}

// zipDirectory is a zip's central directory: its members and where it starts.
type zipDirectory struct {
	entries []zipEntry
	start   int64
}

// zipMetadata returns the bytes of the zip's one top-level *.dist-info/METADATA, at most
// limit bytes, reading only the directory and that member through v. Besides
// errNoRangeRead it fails only as wheelMetadata would on the whole file: no METADATA,
// more than one, or one over limit.
func zipMetadata(ctx context.Context, v *zipView, limit int64) ([]byte, error) {
	dir, err := readZipDirectory(ctx, v, limit)
	if err != nil {
		return nil, err
	}
	i, err := metadataMember(len(dir.entries), func(i int) string { return dir.entries[i].name })
	if err != nil {
		return nil, err
	}
	e := dir.entries[i]
	if err := checkMetadataSize(e.name, e.usize, limit); err != nil {
		return nil, err
	}
	return readZipMember(ctx, v, dir.start, e)
}

// readZipDirectory finds the EOCD (and zip64 EOCD) and parses the central directory,
// which must be no larger than limit and end right where the EOCD records begin.
func readZipDirectory(ctx context.Context, v *zipView, limit int64) (*zipDirectory, error) {
	// archive/zip takes the last signature in the last 64 KiB or so; so does this reader,
	// looking in the tail it holds first, and it also wants the record's comment to end
	// exactly at the end of the file.
	window := min(v.size, eocdLen+maxCommentLen)
	from := max(v.start, v.size-window)
	b, err := v.read(ctx, from, v.size)
	if err != nil {
		return nil, err
	}
	i := lastEOCD(b)
	if i < 0 && from > v.size-window {
		from = v.size - window
		if b, err = v.read(ctx, from, v.size); err != nil {
			return nil, err
		}
		i = lastEOCD(b)
	}
	if i < 0 {
		return nil, noRange("no end of central directory record in the last %d bytes: not a zip file", window)
	}
	rec := b[i:]
	eocd := from + int64(i)
	if n := int64(binary.LittleEndian.Uint16(rec[20:])); eocd+eocdLen+n != v.size {
		return nil, noRange("end of central directory at %d has a %d-byte comment, the file ends %d bytes after it", eocd, n, v.size-eocd-eocdLen)
	}
	disk, dirDisk := binary.LittleEndian.Uint16(rec[4:]), binary.LittleEndian.Uint16(rec[6:])
	records, thisDisk := uint64(binary.LittleEndian.Uint16(rec[10:])), uint64(binary.LittleEndian.Uint16(rec[8:]))
	size, offset := uint64(binary.LittleEndian.Uint32(rec[12:])), uint64(binary.LittleEndian.Uint32(rec[16:]))
	end := eocd // where the central directory must end
	// The same test as archive/zip's for looking for zip64 records.
	if records == 0xffff || size == 0xffff || offset == 0xffffffff {
		z, err := readZip64End(ctx, v, eocd)
		if err != nil {
			return nil, err
		}
		if z != nil {
			end, records, thisDisk, size, offset = z.at, z.records, z.thisDisk, z.size, z.offset
			disk, dirDisk = 0, 0 // checked by readZip64End
		}
	}
	if disk != 0 || dirDisk != 0 || records != thisDisk {
		return nil, noRange("a zip split over several disks")
	}
	if size > uint64(limit) {
		return nil, noRange("central directory of %d bytes is over the %d-byte cap", size, limit)
	}
	if offset > uint64(end) || offset+size != uint64(end) {
		return nil, noRange("central directory at %d+%d does not end where its end record begins (%d)", offset, size, end)
	}
	if records > size/cdHeaderLen {
		return nil, noRange("%d members cannot fit in a %d-byte central directory", records, size)
	}
	start := int64(offset)
	cd, err := v.read(ctx, start, end)
	if err != nil {
		return nil, err
	}
	entries, err := parseCentralDirectory(cd, records)
	if err != nil {
		return nil, err
	}
	return &zipDirectory{entries: entries, start: start}, nil
}

// lastEOCD is the offset in b of the last EOCD signature with room for the record, or -1.
func lastEOCD(b []byte) int {
	return bytes.LastIndex(b[:max(len(b)-eocdLen+4, 0)], []byte("PK\x05\x06"))
}

type zip64End struct {
	at                              int64
	records, thisDisk, size, offset uint64
}

// readZip64End reads the zip64 locator before the EOCD at eocd and the record it points
// to; nil when there is no locator (archive/zip then uses the EOCD's own values).
func readZip64End(ctx context.Context, v *zipView, eocd int64) (*zip64End, error) {
	loc := eocd - z64LocLen
	if loc < 0 {
		return nil, nil
	}
	b, err := v.read(ctx, loc, eocd)
	if err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(b) != z64LocSig {
		return nil, nil
	}
	if binary.LittleEndian.Uint32(b[4:]) != 0 || binary.LittleEndian.Uint32(b[16:]) != 1 {
		return nil, noRange("a zip64 file split over several disks")
	}
	at := binary.LittleEndian.Uint64(b[8:])
	if at > uint64(loc) || uint64(loc)-at < z64EOCDLen {
		return nil, noRange("zip64 end record at %d does not fit before its locator at %d", at, loc)
	}
	r, err := v.read(ctx, int64(at), int64(at)+z64EOCDLen)
	if err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(r) != z64EOCDSig {
		return nil, noRange("no zip64 end record at %d", at)
	}
	if binary.LittleEndian.Uint32(r[16:]) != 0 || binary.LittleEndian.Uint32(r[20:]) != 0 {
		return nil, noRange("a zip64 file split over several disks")
	}
	// The record may carry an extensible data sector; the central directory ends at the
	// record either way.
	return &zip64End{at: int64(at), thisDisk: binary.LittleEndian.Uint64(r[24:]), records: binary.LittleEndian.Uint64(r[32:]),
		size: binary.LittleEndian.Uint64(r[40:]), offset: binary.LittleEndian.Uint64(r[48:])}, nil
}

// parseCentralDirectory parses exactly records headers that fill cd exactly.
func parseCentralDirectory(cd []byte, records uint64) ([]zipEntry, error) {
	entries := make([]zipEntry, 0, records)
	rest := cd
	for n := uint64(0); n < records; n++ {
		if len(rest) < cdHeaderLen || binary.LittleEndian.Uint32(rest) != cdHeaderSig {
			return nil, noRange("central directory member %d: no header at byte %d", n, len(cd)-len(rest))
		}
		h := rest[:cdHeaderLen]
		nameLen := int(binary.LittleEndian.Uint16(h[28:]))
		extraLen := int(binary.LittleEndian.Uint16(h[30:]))
		commentLen := int(binary.LittleEndian.Uint16(h[32:]))
		if len(rest) < cdHeaderLen+nameLen+extraLen+commentLen {
			return nil, noRange("central directory member %d runs past the directory's end", n)
		}
		e := zipEntry{
			flags:  binary.LittleEndian.Uint16(h[8:]),
			method: binary.LittleEndian.Uint16(h[10:]),
			crc:    binary.LittleEndian.Uint32(h[16:]),
			csize:  uint64(binary.LittleEndian.Uint32(h[20:])),
			usize:  uint64(binary.LittleEndian.Uint32(h[24:])),
			offset: int64(binary.LittleEndian.Uint32(h[42:])),
			name:   string(rest[cdHeaderLen : cdHeaderLen+nameLen]),
		}
		if err := e.zip64(rest[cdHeaderLen+nameLen : cdHeaderLen+nameLen+extraLen]); err != nil {
			return nil, fmt.Errorf("central directory member %d (%q): %w", n, e.name, err)
		}
		entries = append(entries, e)
		rest = rest[cdHeaderLen+nameLen+extraLen+commentLen:]
	}
	if len(rest) != 0 {
		return nil, noRange("%d bytes left in the central directory after its %d members", len(rest), records)
	}
	return entries, nil
}

// zip64 takes the sizes and offset the header left at 0xffffffff from the first zip64
// extra field, as archive/zip does.
func (e *zipEntry) zip64(extra []byte) error {
	needU, needC, needOff := e.usize == 0xffffffff, e.csize == 0xffffffff, e.offset == 0xffffffff
	for len(extra) >= 4 {
		tag, size := binary.LittleEndian.Uint16(extra), int(binary.LittleEndian.Uint16(extra[2:]))
		extra = extra[4:]
		if len(extra) < size {
			break
		}
		field := extra[:size]
		extra = extra[size:]
		if tag != zip64ExtraID {
			continue
		}
		for _, need := range []struct {
			on  *bool
			set func(uint64)
		}{
			{&needU, func(x uint64) { e.usize = x }},
			{&needC, func(x uint64) { e.csize = x }},
			{&needOff, func(x uint64) { e.offset = int64(x) }},
		} {
			if !*need.on {
				continue
			}
			*need.on = false
			if len(field) < 8 {
				return noRange("zip64 extra field too short")
			}
			need.set(binary.LittleEndian.Uint64(field))
			field = field[8:]
		}
	}
	if needC || needOff {
		return noRange("sizes over 4 GiB without a zip64 extra field")
	}
	if e.offset < 0 {
		return noRange("offset %d out of range", uint64(e.offset))
	}
	return nil
}

// readZipMember reads e, whose local header and data (and data descriptor) must lie
// before the central directory at cdStart, and returns its checked, inflated bytes.
func readZipMember(ctx context.Context, v *zipView, cdStart int64, e zipEntry) ([]byte, error) {
	if e.flags&flagEncrypted != 0 {
		return nil, noRange("%s is encrypted", e.name)
	}
	switch e.method {
	case methodStore:
		if e.csize != e.usize {
			return nil, noRange("%s is stored, but its sizes differ (%d, %d)", e.name, e.csize, e.usize)
		}
	case methodDeflate:
	default:
		return nil, noRange("%s uses compression method %d (stored and deflate only)", e.name, e.method)
	}
	// The member's bytes cannot exceed the space before the directory; usize is capped
	// already, and deflate never grows data by more than a few bytes per 16 KiB.
	if e.offset > cdStart || e.csize > uint64(cdStart-e.offset) || e.csize > e.usize+e.usize/64+1024 {
		return nil, noRange("%s: %d compressed bytes at %d do not fit before the central directory at %d", e.name, e.csize, e.offset, cdStart)
	}
	descLen := int64(0)
	if e.flags&flagDataDescriptor != 0 {
		descLen = 16
	}
	guess := min(e.offset+localHeaderLen+int64(len(e.name))+localSlack+int64(e.csize)+descLen, cdStart)
	if guess-e.offset < localHeaderLen {
		return nil, noRange("%s: local header at %d runs into the central directory", e.name, e.offset)
	}
	b, err := v.read(ctx, e.offset, guess)
	if err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(b) != localHeaderSig {
		return nil, noRange("%s: no local header at %d", e.name, e.offset)
	}
	nameLen, extraLen := int64(binary.LittleEndian.Uint16(b[26:])), int64(binary.LittleEndian.Uint16(b[28:]))
	body := e.offset + localHeaderLen + nameLen + extraLen
	end := body + int64(e.csize)
	if end > cdStart {
		return nil, noRange("%s: data at %d+%d runs into the central directory at %d", e.name, body, e.csize, cdStart)
	}
	if end+descLen > guess {
		// a long local extra field: fetch the rest
		if b, err = v.read(ctx, e.offset, min(end+descLen, cdStart)); err != nil {
			return nil, err
		}
	}
	if string(b[localHeaderLen:localHeaderLen+nameLen]) != e.name {
		return nil, noRange("%s: local header names %q", e.name, b[localHeaderLen:localHeaderLen+nameLen])
	}
	data := b[body-e.offset : end-e.offset]
	if descLen > 0 {
		// As archive/zip does: 12 bytes after the data, 16 with the optional signature;
		// the CRC must be the directory's.
		d := b[end-e.offset:]
		if len(d) >= 4 && binary.LittleEndian.Uint32(d) == dataDescSig {
			d = d[4:]
		}
		if len(d) < 12 || binary.LittleEndian.Uint32(d) != e.crc {
			return nil, noRange("%s: data descriptor missing or with another CRC", e.name)
		}
	}
	out := data
	if e.method == methodDeflate {
		fr := flate.NewReader(bytes.NewReader(data))
		out, err = io.ReadAll(io.LimitReader(fr, int64(e.usize)+1))
		if err != nil {
			return nil, noRange("%s: inflating: %v", e.name, err)
		}
	}
	if uint64(len(out)) != e.usize {
		return nil, noRange("%s: %d bytes, the directory says %d", e.name, len(out), e.usize)
	}
	if crc32.ChecksumIEEE(out) != e.crc {
		return nil, noRange("%s: CRC-32 mismatch", e.name)
	}
	return bytes.Clone(out), nil
}
