package index

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/pylayer/pylayer/internal/fsx"
	"github.com/pylayer/pylayer/internal/logctx"
)

// Download streams f to dst, verifying its sha256 (and size, when the index
// stated one) while streaming. Bytes go to a "<dst>.*.part" file in dst's
// directory that is fsynced and renamed onto dst only when it verified; on
// any failure it is removed. A hash mismatch wraps ErrHashMismatch, a size
// mismatch ErrSizeMismatch; a file without sha256 is refused (ErrNoHash).
func (c *Client) Download(ctx context.Context, f File, dst string) error {
	if err := checkFileHash(f); err != nil {
		return err
	}
	part, err := fsx.Create(ctx, dst, 0o600)
	if err != nil {
		return fmt.Errorf("downloading %s: %w", f.Filename, err)
	}
	defer part.Cleanup() // nothing once committed
	if err := c.fetchVerified(ctx, f, part); err != nil {
		return err
	}
	if err := part.Commit(ctx); err != nil {
		return fmt.Errorf("downloading %s: %w", f.Filename, err)
	}
	return nil
}

func checkFileHash(f File) error {
	if f.SHA256 == "" {
		return fmt.Errorf("downloading %s: %w: refusing an unverifiable file (use an index that publishes hashes)", f.Filename, ErrNoHash)
	}
	if !sha256HexRe().MatchString(f.SHA256) {
		return fmt.Errorf("downloading %s: %w: the index gave a malformed sha256 %q", f.Filename, ErrNoHash, f.SHA256)
	}
	return nil
}

// fetchVerified copies f's bytes to w and checks size and sha256.
func (c *Client) fetchVerified(ctx context.Context, f File, w io.Writer) error {
	resp, err := c.get(ctx, f.URL, "")
	if err != nil {
		return fmt.Errorf("downloading %s: %w", f.Filename, err)
	}
	defer resp.Body.Close()
	return c.copyVerified(f, resp, w)
}

// copyVerified copies the body of resp, the answer to a GET of f, to w and checks size
// and sha256.
func (c *Client) copyVerified(f File, resp *http.Response, w io.Writer) error {
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("downloading %s: %w", f.Filename, httpError(resp))
	}
	limit := c.opts.maxFileBytes
	if f.Size > 0 {
		limit = f.Size
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return fmt.Errorf("downloading %s: %w", f.Filename, scrubURLError(err))
	}
	switch {
	case f.Size > 0 && n > f.Size:
		return fmt.Errorf("downloading %s: %w: the index says %d bytes, the server sent more", f.Filename, ErrSizeMismatch, f.Size)
	case f.Size > 0 && n != f.Size:
		return fmt.Errorf("downloading %s: %w: the index says %d bytes, got %d", f.Filename, ErrSizeMismatch, f.Size, n)
	case n > limit:
		return fmt.Errorf("downloading %s: over %d bytes (raise WithMaxFileBytes)", f.Filename, limit)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
		return fmt.Errorf("downloading %s: %w: expected %s, got %s", f.Filename, ErrHashMismatch, f.SHA256, got)
	}
	return nil
}

// Metadata returns the core metadata (METADATA file bytes) of f: the PEP 658
// ".metadata" file when the index offers one (checked against
// MetadataSHA256 when given), else the single *.dist-info/METADATA of the
// wheel. That member is read with HTTP range requests (the zip's directory,
// then the member alone); a server that does not answer them, or a zip the
// range reader does not accept, costs a download of the whole wheel, which is
// verified first. With WithMetadataCache, metadata is kept on disk by f's
// sha256 and read from there next time.
func (c *Client) Metadata(ctx context.Context, f File) ([]byte, error) {
	if md, ok := c.cache.get(ctx, f); ok {
		return md, nil
	}
	md, err := c.fetchMetadata(ctx, f)
	if err != nil {
		return nil, err
	}
	c.cache.put(ctx, f, md)
	return md, nil
}

// SizeOf returns f's size: the index's, or, where the index gives none (PEP 503 HTML), the
// one a metadata read of f found: the total of its range answers' Content-Range, or the
// length of the whole file, downloaded and checked against its sha256. It returns 0 when
// neither is known (f's metadata came from the cache, or a metadata file). A size read
// from a range answer is the server's word, as the METADATA read beside it is; a build
// checks the size and the sha256 of the whole file before it uses a byte of it.
func (c *Client) SizeOf(f File) int64 {
	if f.Size > 0 {
		return f.Size
	}
	if n, ok := c.sizes.Load(sizeKey(f)); ok {
		return n.(int64)
	}
	return 0
}

// learnSize records the size a metadata read of f found, for SizeOf.
func (c *Client) learnSize(f File, n int64) {
	if f.Size <= 0 && n > 0 {
		c.sizes.Store(sizeKey(f), n)
	}
}

// sizeKey names f in Client.sizes: a file listed twice with two hashes is two files.
func sizeKey(f File) string { return f.URL + "#" + f.SHA256 }

func (c *Client) fetchMetadata(ctx context.Context, f File) ([]byte, error) {
	if f.HasMetadata {
		return c.metadataFile(ctx, f)
	}
	if !strings.HasSuffix(f.Filename, ".whl") {
		return nil, fmt.Errorf("metadata of %s: not a wheel and the index offers no metadata file", f.Filename)
	}
	if err := checkFileHash(f); err != nil {
		return nil, err
	}
	md, whole, err := c.rangeMetadata(ctx, f)
	switch {
	case whole != nil: // the server sent the whole file
		defer whole.Body.Close()
		return c.downloadMetadata(ctx, f, whole)
	case err == nil || !errors.Is(err, errNoRangeRead):
		return md, err
	}
	logctx.From(ctx).Debug("downloading the whole wheel for its metadata", "file", f.Filename, "reason", err.Error())
	return c.downloadMetadata(ctx, f, nil)
}

// downloadMetadata downloads f to a temporary file, verifies it and reads its METADATA;
// resp, when not nil, is a GET of f already answered.
func (c *Client) downloadMetadata(ctx context.Context, f File, resp *http.Response) ([]byte, error) {
	tmp, err := os.CreateTemp("", "pylayer-wheel-*.whl")
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", f.Filename, err)
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name())
	}()
	if resp != nil {
		err = c.copyVerified(f, resp, tmp)
	} else {
		err = c.fetchVerified(ctx, f, tmp)
	}
	if err != nil {
		return nil, err
	}
	size, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", f.Filename, err)
	}
	md, err := zipFileMetadata(f, tmp, size, c.opts.maxBodyBytes)
	if err == nil {
		c.learnSize(f, size)
	}
	return md, err
}

// zipFileMetadata reads the METADATA of the verified wheel f held by r.
func zipFileMetadata(f File, r io.ReaderAt, size, limit int64) ([]byte, error) {
	zr, err := zip.NewReader(r, size)
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: reading wheel: %w", f.Filename, err)
	}
	md, err := wheelMetadata(zr, limit)
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", f.Filename, err)
	}
	return md, nil
}

func (c *Client) metadataFile(ctx context.Context, f File) ([]byte, error) {
	if f.MetadataSHA256 != "" && !sha256HexRe().MatchString(f.MetadataSHA256) {
		return nil, fmt.Errorf("metadata of %s: the index gave a malformed metadata sha256 %q", f.Filename, f.MetadataSHA256)
	}
	resp, err := c.get(ctx, f.URL+".metadata", "")
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", f.Filename, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metadata of %s: %w", f.Filename, httpError(resp))
	}
	b, err := readCapped(resp.Body, c.opts.maxBodyBytes)
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", f.Filename, scrubURLError(err))
	}
	if f.MetadataSHA256 != "" {
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != f.MetadataSHA256 {
			return nil, fmt.Errorf("metadata of %s: %w: expected %s, got %s", f.Filename, ErrHashMismatch, f.MetadataSHA256, got)
		}
	}
	return b, nil
}

// wheelMetadata returns the bytes of the one top-level *.dist-info/METADATA
// in a wheel, at most limit bytes.
func wheelMetadata(zr *zip.Reader, limit int64) ([]byte, error) {
	i, err := metadataMember(len(zr.File), func(i int) string { return zr.File[i].Name })
	if err != nil {
		return nil, err
	}
	found := zr.File[i]
	if err := checkMetadataSize(found.Name, found.UncompressedSize64, limit); err != nil {
		return nil, err
	}
	rc, err := found.Open()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", found.Name, err)
	}
	defer rc.Close()
	b, err := readCapped(rc, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", found.Name, err)
	}
	return b, nil
}

// metadataMember returns which of n zip members, named by name, is the wheel's one
// top-level *.dist-info/METADATA. The whole-file and the range reader both choose with it.
func metadataMember(n int, name func(int) string) (int, error) {
	found := -1
	for i := range n {
		dir, base, ok := strings.Cut(name(i), "/")
		if !ok || base != "METADATA" || !strings.HasSuffix(dir, ".dist-info") {
			continue
		}
		if found >= 0 {
			return -1, fmt.Errorf("wheel has more than one .dist-info/METADATA (%s, %s)", name(found), name(i))
		}
		found = i
	}
	if found < 0 {
		return -1, errors.New("wheel has no .dist-info/METADATA")
	}
	return found, nil
}

// checkMetadataSize refuses a METADATA member whose stated size is over limit.
func checkMetadataSize(name string, size uint64, limit int64) error {
	if size > uint64(limit) {
		return fmt.Errorf("%s: %w: over %d bytes", name, errTooLarge, limit)
	}
	return nil
}

// requiresPython returns the Requires-Python header of a METADATA file
// (RFC 822 style headers up to the first empty line; continuation lines are
// folded; the first occurrence wins).
func requiresPython(md []byte) string {
	var parts []string
	inField := false
	for rest := md; len(rest) > 0; {
		line := rest
		if i := bytes.IndexByte(rest, '\n'); i >= 0 {
			line, rest = rest[:i], rest[i+1:]
		} else {
			rest = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if len(line) == 0 {
			break
		}
		if line[0] == ' ' || line[0] == '\t' {
			if inField {
				parts = append(parts, string(bytes.TrimSpace(line)))
			}
			continue
		}
		if inField {
			break
		}
		k, v, ok := bytes.Cut(line, []byte(":"))
		if ok && strings.EqualFold(string(bytes.TrimSpace(k)), "Requires-Python") {
			parts, inField = append(parts, string(bytes.TrimSpace(v))), true
		}
	}
	return strings.Join(parts, " ")
}
