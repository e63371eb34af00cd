package sign

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	ggcr "github.com/google/go-containerregistry/pkg/v1"
	"github.com/pylayer/pylayer/internal/testenv"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// cosignBinary finds the stock cosign CLI: $PYLAYER_COSIGN, or where `make tools`
// builds it. The interop test fails (never skips) without it.
func cosignBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("PYLAYER_COSIGN")
	if p == "" {
		home, _ := os.UserHomeDir()
		p = filepath.Join(home, ".cache", "pylayer", "tools", "cosign-v2.6.5", "cosign")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("the stock cosign CLI is needed for the interop test: %v (run `make tools`, or set PYLAYER_COSIGN)", err)
	}
	return p
}

// runCosign runs the stock CLI with a private HOME, the test password, and every
// connection that is not to 127.0.0.1 sent to a dead proxy, so that a test that
// would need the network (TUF, Rekor) fails instead of depending on it.
func runCosign(t *testing.T, bin string, args ...string) (string, error) {
	t.Helper()
	return runCosignEnv(t, bin, nil, args...)
}

// runCosignEnv is runCosign with env added to the environment.
func runCosignEnv(t *testing.T, bin string, env []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	home := t.TempDir()
	cmd.Env = []string{
		"HOME=" + home,
		"PATH=/usr/bin:/bin",
		"COSIGN_PASSWORD=" + testPassword,
		"TUF_ROOT=" + filepath.Join(home, "tuf"),
		"HTTPS_PROXY=http://127.0.0.1:9", "HTTP_PROXY=http://127.0.0.1:9",
		"NO_PROXY=127.0.0.1,localhost",
	}
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func TestInteropStockCosign(t *testing.T) {
	testenv.Integration(t, "the stock cosign CLI (make tools)")
	bin := cosignBinary(t)
	k := testKeys(t)
	ctx := context.Background()
	s, _ := newRegistry(t)
	ref := func(d v1.Descriptor) string { return s.Name() + "@" + d.Digest.String() }
	verifyArgs := func(pub string, d v1.Descriptor) []string {
		return []string{"verify", "--key", pub, "--insecure-ignore-tlog=true", "--allow-insecure-registry", "--allow-http-registry", ref(d)}
	}

	t.Run("pylayer signs, cosign verifies", func(t *testing.T) {
		subject := pushSubject(t, s, "ours")
		mustSign(t, s, subject, k[0].signer)
		if out, err := runCosign(t, bin, verifyArgs(k[0].pub, subject)...); err != nil {
			t.Fatalf("cosign verify of our signature: %v\n%s", err, out)
		} else if !strings.Contains(out, subject.Digest.String()) {
			t.Fatalf("cosign verify printed no payload naming %s:\n%s", subject.Digest, out)
		}
		if out, err := runCosign(t, bin, verifyArgs(k[1].pub, subject)...); err == nil {
			t.Fatalf("cosign verify with another key accepted our signature:\n%s", out)
		}
	})

	t.Run("cosign signs, pylayer verifies", func(t *testing.T) {
		subject := pushSubject(t, s, "theirs")
		if out, err := runCosign(t, bin, "sign", "--key", k[0].priv, "--tlog-upload=false", "--yes",
			"--allow-insecure-registry", "--allow-http-registry", ref(subject)); err != nil {
			t.Fatalf("cosign sign: %v\n%s", err, out)
		}
		r, err := Verify(ctx, s, subject, verifierFor(t, k[0].pub))
		if err != nil {
			t.Fatalf("Verify of cosign's signature: %v", err)
		}
		if r.Verified[0].DockerReference != s.Name() {
			t.Fatalf("cosign claimed %q, want %q", r.Verified[0].DockerReference, s.Name())
		}
		if _, err := Verify(ctx, s, subject, verifierFor(t, k[1].pub)); !errors.Is(err, ErrUntrusted) {
			t.Fatalf("Verify with another key: %v, want %v", err, ErrUntrusted)
		}

		// The bytes cosign wrote are the bytes Sign writes for the same signature.
		sm, raw, _ := readSig(t, s, subject)
		l := sm.Signatures()[0]
		h, _ := ggcr.NewHash(l.Desc.Digest.String())
		payload, err := Payload(subject.Digest, s.Name())
		if err != nil {
			t.Fatal(err)
		}
		if h.String() != ggcrDigest(payload) {
			t.Fatalf("cosign's payload %s differs from ours %s", h, ggcrDigest(payload))
		}
		ours, _, err := appendSignature(nil, nil, ggcr.Descriptor{MediaType: MediaTypeSimpleSigning, Size: l.Desc.Size, Digest: h, Annotations: l.Desc.Annotations})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ours, raw) {
			t.Fatalf("cosign wrote\n%s\nSign would write\n%s", raw, ours)
		}

		// Appending to cosign's manifest keeps both signatures valid for cosign.
		mustSign(t, s, subject, k[1].signer)
		for _, pub := range []string{k[0].pub, k[1].pub} {
			if out, err := runCosign(t, bin, verifyArgs(pub, subject)...); err != nil {
				t.Fatalf("cosign verify --key %s after appending: %v\n%s", filepath.Base(pub), err, out)
			}
		}
	})

	t.Run("tampered or copied signatures fail in cosign too", func(t *testing.T) {
		subject := pushSubject(t, s, "tampered")
		other := pushSubject(t, s, "copied")
		mustSign(t, s, subject, k[0].signer)
		dropReferrers(t, s, subject)                           // else its intact copy verifies
		editSig(t, s, subject, other, func(*ggcr.Manifest) {}) // copy onto other's tag
		editSig(t, s, subject, subject, func(m *ggcr.Manifest) {
			sig, _ := base64.StdEncoding.DecodeString(m.Layers[0].Annotations[AnnotationSignature])
			sig[len(sig)-3] ^= 1
			m.Layers[0].Annotations[AnnotationSignature] = base64.StdEncoding.EncodeToString(sig)
		})
		for _, c := range []struct {
			d    v1.Descriptor
			want error
		}{{subject, ErrUntrusted}, {other, ErrPayloadMismatch}} {
			if out, err := runCosign(t, bin, verifyArgs(k[0].pub, c.d)...); err == nil {
				t.Fatalf("cosign verify accepted %s:\n%s", c.want, out)
			}
			if _, err := Verify(ctx, s, c.d, verifierFor(t, k[0].pub)); !errors.Is(err, c.want) {
				t.Fatalf("Verify: %v, want %v", err, c.want)
			}
		}
	})
}

func ggcrDigest(b []byte) string {
	h, _, _ := ggcr.SHA256(bytes.NewReader(b))
	return h.String()
}
