package oci

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

func TestVerifyReader(t *testing.T) {
	content := []byte(strings.Repeat("layer bytes ", 1000))
	good := v1.Descriptor{Digest: digest.FromBytes(content), Size: int64(len(content))}
	boom := errors.New("connection reset")
	tests := []struct {
		name   string
		src    io.Reader
		want   v1.Descriptor
		err    error // nil: verifies
		digest bool  // the error also matches ErrDigestMismatch
		msg    string
	}{
		{"exact", bytes.NewReader(content), good, nil, false, ""},
		{"exact, one byte at a time", iotest.OneByteReader(bytes.NewReader(content)), good, nil, false, ""},
		{"exact, EOF with the data", iotest.DataErrReader(bytes.NewReader(content)), good, nil, false, ""},
		{"empty", bytes.NewReader(nil), v1.Descriptor{Digest: digest.FromBytes(nil)}, nil, false, ""},
		{"short", bytes.NewReader(content[:10]), good, ErrSizeMismatch, true, "10 bytes, its descriptor states"},
		{"long", io.MultiReader(bytes.NewReader(content), strings.NewReader("x")), good, ErrSizeMismatch, true, "more than the"},
		{"endless", iotest.OneByteReader(strings.NewReader(strings.Repeat("y", 1<<16))), good, ErrSizeMismatch, true, "more than the"},
		{"other content", bytes.NewReader(bytes.ToUpper(content)), good, ErrDigestMismatch, true, "hashes to"},
		{"source fails", iotest.ErrReader(boom), good, boom, false, "after 0 of"},
		{"verifying source fails", NewVerifyReader(bytes.NewReader(bytes.ToUpper(content)), good), good, ErrDigestMismatch, true, "sha256"},
		{"source fails midway", io.MultiReader(bytes.NewReader(content[:5]), iotest.ErrReader(boom)), good, boom, false, "after 5 of"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := NewVerifyReader(tt.src, tt.want)
			got, err := io.ReadAll(v)
			if int64(len(got)) > tt.want.Size {
				t.Errorf("yielded %d bytes, more than the descriptor's %d", len(got), tt.want.Size)
			}
			if tt.err == nil {
				if err != nil || !v.Verified() || v.Err() != nil || !bytes.Equal(got, content[:tt.want.Size]) {
					t.Fatalf("ReadAll = %d bytes, %v; Verified %v, Err %v", len(got), err, v.Verified(), v.Err())
				}
				return
			}
			if !errors.Is(err, tt.err) || errors.Is(err, ErrDigestMismatch) != tt.digest || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("ReadAll error = %v, want %v (ErrDigestMismatch %v) mentioning %q", err, tt.err, tt.digest, tt.msg)
			}
			if strings.Contains(err.Error(), "after") && errors.Is(err, ErrDigestMismatch) {
				t.Errorf("a mismatch reported as a read failure: %v", err)
			}
			if !strings.Contains(err.Error(), string(tt.want.Digest)) {
				t.Errorf("error does not name the digest: %v", err)
			}
			if v.Verified() || !errors.Is(v.Err(), tt.err) {
				t.Errorf("Verified %v, Err %v after a failure", v.Verified(), v.Err())
			}
			// Sticky: reading again returns the same error and no bytes.
			if n, again := v.Read(make([]byte, 10)); n != 0 || again != v.Err() {
				t.Errorf("Read after the failure = %d, %v", n, again)
			}
		})
	}
}

func TestVerifyReaderClose(t *testing.T) {
	d := v1.Descriptor{Digest: digest.FromString("x"), Size: 1}
	rc := &closeCount{Reader: strings.NewReader("x")}
	if err := NewVerifyReader(rc, d).Close(); err != nil || rc.n != 1 {
		t.Errorf("Close = %v, closed %d times", err, rc.n)
	}
	if err := NewVerifyReader(strings.NewReader("x"), d).Close(); err != nil {
		t.Errorf("Close of a reader without Close = %v", err)
	}
	// Before the end, there is no verdict yet.
	v := NewVerifyReader(strings.NewReader("x"), d)
	if v.Verified() || v.Err() != nil {
		t.Errorf("unread: Verified %v, Err %v", v.Verified(), v.Err())
	}
}

type closeCount struct {
	io.Reader
	n int
}

func (c *closeCount) Close() error { c.n++; return nil }

func TestCheckBytes(t *testing.T) {
	b := []byte("manifest")
	d := v1.Descriptor{Digest: digest.FromBytes(b), Size: int64(len(b))}
	if err := CheckBytes(b, d); err != nil {
		t.Errorf("CheckBytes(match) = %v", err)
	}
	if err := CheckBytes(b[:3], d); !errors.Is(err, ErrSizeMismatch) || !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("CheckBytes(short) = %v, want ErrSizeMismatch, also ErrDigestMismatch", err)
	}
	if err := CheckBytes([]byte("MANIFEST"), d); !errors.Is(err, ErrDigestMismatch) || errors.Is(err, ErrSizeMismatch) {
		t.Errorf("CheckBytes(other) = %v, want ErrDigestMismatch only", err)
	}
}
