package registry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// PushBlob uploads d unless the repository has it (HEAD) or can mount it from
// Options.MountFrom. An upload is one monolithic PUT of the bytes open returns, checked
// against d as they are sent. A transient failure starts over from the HEAD (the failed
// attempt may have completed) with a fresh upload session, up to Options.Retries attempts.
func (r *remoteRepo) PushBlob(ctx context.Context, d v1.Descriptor, open func() (io.ReadCloser, error)) (bool, error) {
	if err := checkDesc(d); err != nil {
		return false, fmt.Errorf("%s: pushing blob: %w", r.Name(), err)
	}
	c, err := r.pushClient(ctx)
	if err != nil {
		return false, err
	}
	for attempt := 1; ; attempt++ {
		uploaded, err := r.pushBlobOnce(ctx, c, d, open, attempt)
		if err == nil {
			return uploaded, nil
		}
		var again *retryable
		if !errors.As(err, &again) || attempt >= r.opts.Retries || ctx.Err() != nil {
			if errors.As(err, &again) {
				return false, fmt.Errorf("%w (after %d attempts)", again.err, attempt)
			}
			return false, err
		}
		r.note.emit(Event{Kind: Retrying, Digest: d.Digest, Size: d.Size, Attempt: attempt, Err: again.err})
		if err := backoff(ctx, r.opts.RetryDelay, attempt); err != nil {
			return false, err
		}
	}
}

// retryable marks a failure of a step the transport could not replay by itself.
type retryable struct{ err error }

func (e *retryable) Error() string { return e.err.Error() }
func (e *retryable) Unwrap() error { return e.err }

func (r *remoteRepo) pushBlobOnce(ctx context.Context, c *http.Client, d v1.Descriptor, open func() (io.ReadCloser, error), attempt int) (bool, error) {
	if ok, err := r.hasBlob(ctx, c, d); err != nil || ok {
		if ok {
			r.note.emit(Event{Kind: BlobExists, Digest: d.Digest, Size: d.Size})
		}
		return false, err
	}
	start := "blobs/uploads/"
	if r.mountFrom != "" {
		start += "?" + url.Values{"mount": {string(d.Digest)}, "from": {r.mountFrom}}.Encode()
	}
	resp, err := r.do(ctx, c, http.MethodPost, start, nil, nil, 0)
	if err != nil {
		return false, err
	}
	switch resp.StatusCode {
	case http.StatusCreated: // mounted
		drain(resp.Body)
		r.note.emit(Event{Kind: BlobMounted, Digest: d.Digest, Size: d.Size})
		return false, nil
	case http.StatusAccepted:
		drain(resp.Body)
	default:
		return false, r.statusError(resp, "push to", "starting the upload of blob "+string(d.Digest))
	}
	loc, err := uploadURL(resp, d.Digest)
	if err != nil {
		return false, fmt.Errorf("%s: blob %s: %w", r.Name(), d.Digest, err)
	}

	r.note.emit(Event{Kind: BlobUploading, Digest: d.Digest, Size: d.Size, Attempt: attempt})
	rc, err := open()
	if err != nil {
		return false, fmt.Errorf("%s: opening blob %s to upload: %w", r.Name(), d.Digest, err)
	}
	// The reader is not replayable (no GetBody), so the transport never resends it.
	body := &lockedBody{v: oci.NewVerifyReader(rc, d)}
	hdr := http.Header{"Content-Type": {"application/octet-stream"}}
	resp, err = r.do(ctx, c, http.MethodPut, loc, hdr, body, d.Size)
	if local := body.failed(); errors.Is(local, ErrDigestMismatch) {
		if resp != nil {
			drain(resp.Body)
		}
		return false, fmt.Errorf("%s: not uploading: %w (the local copy changed or is corrupt)", r.Name(), local)
	}
	if err != nil {
		if ctx.Err() == nil && transientNetError(err) {
			return false, &retryable{err}
		}
		return false, err
	}
	if resp.StatusCode != http.StatusCreated {
		serr := r.statusError(resp, "push to", "uploading blob "+string(d.Digest))
		var se *Error
		if errors.As(serr, &se) && se.Temporary() {
			return false, &retryable{serr}
		}
		return false, serr
	}
	drain(resp.Body)
	if got := resp.Header.Get("Docker-Content-Digest"); got != "" && got != string(d.Digest) {
		return false, fmt.Errorf("%s: blob %s: %w: the registry stored it as %s", r.Name(), d.Digest, ErrDigestMismatch, got)
	}
	r.note.emit(Event{Kind: BlobUploaded, Digest: d.Digest, Size: d.Size})
	return true, nil
}

// uploadURL resolves the Location of an upload session and adds ?digest=.
func uploadURL(resp *http.Response, d digest.Digest) (string, error) {
	loc := resp.Header.Get("Location")
	if loc == "" {
		return "", errors.New("the registry started an upload without a Location")
	}
	u, err := resp.Request.URL.Parse(loc)
	if err != nil {
		return "", fmt.Errorf("upload Location: %w", err)
	}
	q := u.Query()
	q.Set("digest", string(d))
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// PushManifest stores raw under tag, or by digest when tag is "". The registry checks
// that every blob it references is present.
func (r *remoteRepo) PushManifest(ctx context.Context, raw []byte, mediaType, tag string) (v1.Descriptor, error) {
	desc, err := manifestDesc(raw, mediaType, tag)
	if err != nil {
		return v1.Descriptor{}, fmt.Errorf("%s: pushing manifest: %w", r.Name(), err)
	}
	c, err := r.pushClient(ctx)
	if err != nil {
		return v1.Descriptor{}, err
	}
	reference := tag
	if reference == "" {
		reference = string(desc.Digest)
	}
	hdr := http.Header{"Content-Type": {mediaType}}
	resp, err := r.do(ctx, c, http.MethodPut, "manifests/"+reference, hdr, bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		return v1.Descriptor{}, err
	}
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return v1.Descriptor{}, r.statusError(resp, "push to", "pushing manifest "+reference)
	}
	drain(resp.Body)
	if got := resp.Header.Get("Docker-Content-Digest"); got != "" && got != string(desc.Digest) {
		return v1.Descriptor{}, fmt.Errorf("%s: manifest %s: %w: the registry stored it as %s", r.Name(), desc.Digest, ErrDigestMismatch, got)
	}
	r.note.emit(Event{Kind: ManifestPushed, Digest: desc.Digest, Size: desc.Size, Tag: tag})
	return desc, nil
}

// manifestDesc checks a manifest about to be pushed and returns its descriptor.
func manifestDesc(raw []byte, mediaType, tag string) (v1.Descriptor, error) {
	if tag != "" {
		if err := oci.ValidTag(tag); err != nil {
			return v1.Descriptor{}, err
		}
	}
	if mediaType == "" {
		return v1.Descriptor{}, errors.New("no media type given")
	}
	if len(raw) == 0 || len(raw) > maxManifest {
		return v1.Descriptor{}, fmt.Errorf("manifest is %d bytes; it must be 1 to %d", len(raw), maxManifest)
	}
	return v1.Descriptor{
		MediaType:    mediaType,
		ArtifactType: artifactTypeOf(raw),
		Digest:       digest.FromBytes(raw),
		Size:         int64(len(raw)),
	}, nil
}
