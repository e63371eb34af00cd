package wheel

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/csv"
	"errors"
	"fmt"
	"hash"
	"io"
	"sort"
	"strconv"
	"strings"
)

// recordRow is one parsed RECORD row.
type recordRow struct {
	line  int
	algo  string           // "sha256", "sha384" or "sha512"; "" with no hash
	hash  []byte           // nil with no hash
	size  int64            // -1 with no size
	newFn func() hash.Hash // the algorithm
}

var hashAlgos = map[string]struct {
	newFn func() hash.Hash
	size  int
}{
	"sha256": {sha256.New, sha256.Size},
	"sha384": {sha512.New384, sha512.Size384},
	"sha512": {sha512.New, sha512.Size},
}

// parseRecord parses RECORD (CSV, like Python's csv module reads it) into rows by path.
// Every row has three fields; a hash is "<algo>=<urlsafe base64, no padding>" with algo
// sha256 or stronger; a hash needs a size. A path listed twice is an error.
func parseRecord(b []byte) (map[string]recordRow, error) {
	cr := csv.NewReader(bytes.NewReader(b))
	cr.FieldsPerRecord = -1
	rows := map[string]recordRow{}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%w: RECORD is not valid CSV: %v", ErrRecordMismatch, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) != 3 {
			return nil, fmt.Errorf("%w: RECORD line %d has %d fields, want 3 (path,hash,size)", ErrRecordMismatch, line, len(rec))
		}
		name := rec[0]
		bad := func(why string) (map[string]recordRow, error) {
			return nil, fmt.Errorf("%w for %s: RECORD line %d: %s", ErrRecordMismatch, name, line, why)
		}
		if _, dup := rows[name]; dup {
			return bad("listed twice")
		}
		row := recordRow{line: line, size: -1}
		if rec[1] != "" {
			algo, digest, ok := strings.Cut(rec[1], "=")
			a, known := hashAlgos[algo]
			if !ok || !known {
				return bad(fmt.Sprintf("hash %q is not sha256, sha384 or sha512", rec[1]))
			}
			sum, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(digest, "="))
			if err != nil || len(sum) != a.size {
				return bad(fmt.Sprintf("malformed %s digest %q", algo, digest))
			}
			row.algo, row.hash, row.newFn = algo, sum, a.newFn
		}
		if rec[2] != "" {
			n, err := strconv.ParseInt(rec[2], 10, 64)
			if err != nil || n < 0 || rec[2][0] == '+' {
				return bad(fmt.Sprintf("malformed size %q", rec[2]))
			}
			row.size = n
		}
		if row.hash != nil && row.size < 0 {
			return bad("hash without size")
		}
		rows[name] = row
	}
	return rows, nil
}

func b64(sum []byte) string { return base64.RawURLEncoding.EncodeToString(sum) }

// verify reads r to its end (at most the row's size plus one byte) and compares size and
// digest with the row.
func (row recordRow) verify(name string, r io.Reader) error {
	h := row.newFn()
	n, err := copyPooled(h, io.LimitReader(r, row.size+1))
	if err != nil {
		return fmt.Errorf("%w: inflating %s: %v", ErrBadWheel, name, err)
	}
	return row.check(name, n, h.Sum(nil))
}

// verifyKeep is verify for a member small enough to hold: it returns the bytes it
// verified, so that they are written without inflating the member again.
func (row recordRow) verifyKeep(name string, r io.Reader) ([]byte, error) {
	b := make([]byte, row.size)
	n, err := io.ReadFull(r, b)
	if err == nil {
		var one [1]byte // to the end: the zip reader checks the CRC there
		var m int
		if m, err = io.ReadFull(r, one[:]); m > 0 {
			n++
		}
		if err == io.EOF {
			err = nil
		}
	} else if err == io.ErrUnexpectedEOF || err == io.EOF {
		err = nil // short: the size check below says so
	}
	if err != nil {
		return nil, fmt.Errorf("%w: inflating %s: %v", ErrBadWheel, name, err)
	}
	if err := row.check(name, int64(n), row.sum(b[:min(n, len(b))])); err != nil {
		return nil, err
	}
	return b, nil
}

// sum is the row's digest of b.
func (row recordRow) sum(b []byte) []byte {
	h := row.newFn()
	h.Write(b)
	return h.Sum(nil)
}

func (row recordRow) check(name string, n int64, sum []byte) error {
	if n != row.size {
		return fmt.Errorf("%w for %s: size %d != %d (RECORD)", ErrRecordMismatch, name, n, row.size)
	}
	if !bytes.Equal(sum, row.hash) {
		return fmt.Errorf("%w for %s: %s %s != %s (RECORD)", ErrRecordMismatch, name, row.algo, b64(sum), b64(row.hash))
	}
	return nil
}

// outRow is one row of the RECORD that Install writes.
type outRow struct{ path, hash, size string }

// writeRecord renders rows sorted, as pip writes RECORD with Python's csv module:
// minimal quoting and "\r\n" line ends.
func writeRecord(rows []outRow) []byte {
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.path != b.path {
			return a.path < b.path
		}
		if a.hash != b.hash {
			return a.hash < b.hash
		}
		return a.size < b.size
	})
	var buf bytes.Buffer
	for _, r := range rows {
		buf.WriteString(csvField(r.path))
		buf.WriteByte(',')
		buf.WriteString(csvField(r.hash))
		buf.WriteByte(',')
		buf.WriteString(csvField(r.size))
		buf.WriteString("\r\n")
	}
	return buf.Bytes()
}

// csvField quotes like Python's csv.writer with QUOTE_MINIMAL: when the field holds the
// delimiter, the quote character or a line end character.
func csvField(s string) string {
	if !strings.ContainsAny(s, ",\"\r\n") {
		return s
	}
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}
