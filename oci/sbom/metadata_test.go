package sbom

import (
	"archive/tar"
	"bytes"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// TestScanLayerCodecs: METADATA is found in a layer blob whatever its codec, plain,
// gzip'd or zstd-compressed, and another media type is refused by name.
func TestScanLayerCodecs(t *testing.T) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	meta := "Metadata-Version: 2.1\nName: a\nVersion: 1.0\n"
	for name, body := range map[string]string{"site-packages/a-1.0.dist-info/METADATA": meta} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var gz, zs bytes.Buffer
	gw := gzip.NewWriter(&gz)
	gw.Write(raw.Bytes())
	gw.Close()
	zw, err := zstd.NewWriter(&zs)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(raw.Bytes())
	zw.Close()
	for mt, b := range map[string][]byte{v1.MediaTypeImageLayer: raw.Bytes(), v1.MediaTypeImageLayerGzip: gz.Bytes(), v1.MediaTypeImageLayerZstd: zs.Bytes()} {
		got, err := scanLayer(bytes.NewReader(b), mt)
		if err != nil || string(got) != meta {
			t.Errorf("%s: METADATA %q, %v; want %q", mt, got, err, meta)
		}
	}
	if _, err := scanLayer(bytes.NewReader(raw.Bytes()), "application/vnd.oci.image.layer.v1.tar+bzip2"); err == nil {
		t.Error("a bzip2 layer was read")
	}
}
