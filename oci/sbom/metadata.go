package sbom

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/pylayer/pylayer/layers/wheel"
	"github.com/pylayer/pylayer/oci"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// maxMetadataBytes bounds the METADATA read from a layer (long descriptions included),
// as layers/wheel bounds it when installing.
const maxMetadataBytes = 16 << 20

// metadata is the header fields of a wheel's core metadata (METADATA), in order, with
// the values made readable: continuation lines lose the indentation core metadata gives
// them (eight spaces, or seven and "|"), and trailing white space goes.
type metadata struct{ f wheel.Fields }

// get is the first value of the field, matched ignoring case.
func (m metadata) get(name string) string { return clean(m.f.Get(name)) }

// all is every value of the field, in order.
func (m metadata) all(name string) []string {
	vs := m.f.All(name)
	for i, v := range vs {
		vs[i] = clean(v)
	}
	return vs
}

// parseMetadata reads the header block of core metadata with layers/wheel's parser (the
// email parser's reading); the body (the long description) is ignored. Bytes that are
// not UTF-8 are replaced.
func parseMetadata(b []byte) metadata {
	if !utf8.Valid(b) {
		b = []byte(strings.ToValidUTF8(string(b), "\uFFFD"))
	}
	return metadata{wheel.ParseFields(b)}
}

// clean unindents a field's continuation lines and trims trailing white space.
func clean(v string) string {
	lines := strings.Split(v, "\n")
	for i, l := range lines {
		l = strings.TrimSuffix(l, "\r")
		if i > 0 {
			l = unindent(l)
		}
		lines[i] = l
	}
	return strings.TrimRight(strings.Join(lines, "\n"), " \t\n")
}

func unindent(line string) string {
	switch {
	case strings.HasPrefix(line, "        "):
		return line[8:]
	case strings.HasPrefix(line, "       |"):
		return line[8:]
	}
	return strings.TrimLeft(line, " \t")
}

// isMetadataPath reports whether a layer entry is the METADATA of an installed wheel:
// site-packages/<name>-<version>.dist-info/METADATA (layers/wheel's tree layout).
func isMetadataPath(name string) bool {
	dir, file := path.Split(name)
	dir = strings.TrimSuffix(dir, "/")
	return file == "METADATA" && path.Dir(dir) == "site-packages" && strings.HasSuffix(dir, ".dist-info")
}

// wheelMetadata reads the METADATA of the wheel installed in layer blob d, nil when the
// layer holds none. The blob is read only as far as METADATA, then the rest of it is
// hashed (not unpacked), so that its digest is checked all the same.
func wheelMetadata(ctx context.Context, blobs Blobs, d v1.Descriptor) ([]byte, error) {
	rc, err := blobs.Blob(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("opening layer blob %s: %w", d.Digest, err)
	}
	defer rc.Close()
	vr := oci.NewVerifyReader(rc, d)
	meta, err := scanLayer(vr, d.MediaType)
	if err != nil {
		return nil, fmt.Errorf("reading layer blob %s: %w", d.Digest, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if _, err := io.Copy(io.Discard, vr); err != nil {
		return nil, fmt.Errorf("reading layer blob %s: %w", d.Digest, err)
	}
	return meta, nil
}

// scanLayer finds the METADATA entry in a layer stream of the given media type.
func scanLayer(r io.Reader, mediaType string) ([]byte, error) {
	lr, err := oci.LayerReader(r, mediaType)
	if err != nil {
		return nil, fmt.Errorf("%w (an SBOM is read from the layers pylayer writes)", err)
	}
	defer lr.Close()
	tr := tar.NewReader(lr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg || !isMetadataPath(h.Name) {
			continue
		}
		if h.Size > maxMetadataBytes {
			return nil, fmt.Errorf("%s is %d bytes, the limit is %d", h.Name, h.Size, maxMetadataBytes)
		}
		return io.ReadAll(tr)
	}
}
