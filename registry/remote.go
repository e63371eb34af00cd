package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	"github.com/pylayer/pylayer/oci/sign"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
	"github.com/pylayer/pylayer/registry/local"
)

// maxManifest bounds manifest documents, as registries do (4 MiB).
const maxManifest = 4 << 20

// manifestAccept lists the manifest media types pylayer reads.
var manifestAccept = strings.Join([]string{
	v1.MediaTypeImageManifest, v1.MediaTypeImageIndex,
	"application/vnd.docker.distribution.manifest.v2+json",
	"application/vnd.docker.distribution.manifest.list.v2+json",
}, ", ")

// remoteRepo is a repository in a registry, spoken to with the OCI distribution API over
// go-containerregistry's auth handshake (basic, bearer tokens, credential helpers).
type remoteRepo struct {
	host, path string // "127.0.0.1:5000", "team/pylayer"
	mountFrom  string // path of Options.MountFrom
	opts       Options
	reg        name.Registry
	auth       authn.Authenticator
	base       http.RoundTripper
	note       *notifier

	mu   sync.Mutex
	pull *http.Client // pull scope, made by Open
	push *http.Client // push (and mount source pull) scope, made on first write
}

var (
	_ Repo                 = (*remoteRepo)(nil)
	_ sign.ReferrersLister = (*remoteRepo)(nil)
)

func openRemote(ctx context.Context, ref Ref, o Options) (*remoteRepo, error) {
	r := &remoteRepo{host: ref.Host(), path: ref.Path(), opts: o, note: &notifier{fn: o.Progress, repo: ref.Repo}}
	if o.MountFrom != "" {
		from := o.MountFrom
		if h, p, ok := strings.Cut(from, "/"); ok && local.CheckHost(h) == nil {
			if h != r.host {
				return nil, fmt.Errorf("options: cannot mount from %q: it is on %s, not on %s", from, h, r.host)
			}
			from = p
		}
		if err := local.CheckRepoPath(from); err != nil {
			return nil, fmt.Errorf("options: mount source: %w", err)
		}
		r.mountFrom = from
	}
	var opts []name.Option
	if PlainHTTPAllowed(r.host, o.Insecure) {
		opts = append(opts, name.Insecure)
	}
	reg, err := name.NewRegistry(r.host, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %v", ref.Repo, ErrInvalidRef, err)
	}
	r.reg = reg
	if r.base, err = baseTransport(o); err != nil {
		return nil, err
	}
	if r.auth, err = authn.Resolve(ctx, o.Keychain, reg); err != nil {
		return nil, fmt.Errorf("%s: looking up credentials for %s: %w", ref.Repo, r.host, err)
	}
	if r.pull, err = r.client(ctx, "pull"); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *remoteRepo) Name() string { return r.host + "/" + r.path }

// client pings the registry and authenticates for the given actions on the repository.
func (r *remoteRepo) client(ctx context.Context, actions string) (*http.Client, error) {
	scopes := []string{"repository:" + r.path + ":" + actions}
	if actions != "pull" && r.mountFrom != "" {
		scopes = append(scopes, "repository:"+r.mountFrom+":pull")
	}
	rt, err := transport.NewWithContext(ctx, r.reg, r.auth, r.base, scopes)
	if err != nil {
		return nil, r.connError(err)
	}
	return &http.Client{Transport: rt}, nil
}

func (r *remoteRepo) pushClient(ctx context.Context) (*http.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.push == nil {
		c, err := r.client(ctx, "pull,push")
		if err != nil {
			return nil, err
		}
		r.push = c
	}
	return r.push, nil
}

// connError turns a failed handshake into a message a user can act on, never quoting
// credentials.
func (r *remoteRepo) connError(err error) error {
	var unreachable *unreachableError
	var plain *plainHTTPError
	var terr *transport.Error
	var unknownCA x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var certErr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &unreachable):
		return fmt.Errorf("%s: %w", r.Name(), unreachable)
	case errors.As(err, &plain):
		return fmt.Errorf("%s: %w", r.Name(), plain)
	case errors.As(err, &unknownCA) || errors.As(err, &certErr) && !errors.As(err, &hostErr):
		// Only the certificate's error: the transport's own text goes on about its
		// fallback to plain HTTP, which is not what went wrong.
		var cause error = unknownCA
		if certErr != nil {
			cause = certErr
		}
		return fmt.Errorf("%s: the TLS certificate of %s is not trusted (%v): pass --ca-file with the CA that signed it (or list it with --insecure-registry): %w", r.Name(), r.host, cause, ErrUntrustedCert)
	case errors.As(err, &hostErr):
		return fmt.Errorf("%s: the TLS certificate of %s is not valid for that name: %v", r.Name(), r.host, hostErr)
	case errors.As(err, &terr) && (terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden):
		return r.authError(terr.StatusCode, "pull")
	}
	return fmt.Errorf("%s: connecting to %s: %w", r.Name(), r.host, err)
}

// authError says what went wrong with the credentials, and where they came from: none
// were found (so none were sent), or the registry refused the ones a source gave.
func (r *remoteRepo) authError(status int, action string) error {
	src := credentialSource(r.host, r.opts.Keychain == authn.DefaultKeychain)
	anonymous := r.auth == authn.Anonymous
	switch {
	case status == http.StatusForbidden && anonymous:
		return fmt.Errorf("%s: access denied: anonymous access may not %s this repository, and no credentials for %s were found in %s: run `docker login %s`: %w",
			r.Name(), action, r.host, src, r.host, ErrUnauthorized)
	case status == http.StatusForbidden:
		return fmt.Errorf("%s: access denied: the credentials for %s (from %s) may not %s this repository: %w", r.Name(), r.host, src, action, ErrUnauthorized)
	case anonymous:
		return fmt.Errorf("%s: authentication failed: no credentials for %s were found in %s (none were sent): run `docker login %s`, or set DOCKER_CONFIG to the directory of a config.json that has them: %w",
			r.Name(), r.host, src, r.host, ErrUnauthorized)
	}
	return fmt.Errorf("%s: authentication failed: the registry rejected the credentials for %s from %s: check them, or run `docker login %s` again: %w",
		r.Name(), r.host, src, r.host, ErrUnauthorized)
}

// do sends one request to the repository's API path ("manifests/<ref>", "blobs/<d>") or to
// an absolute URL (an upload location).
func (r *remoteRepo) do(ctx context.Context, c *http.Client, method, target string, hdr http.Header, body io.Reader, size int64) (*http.Response, error) {
	u := target
	if !strings.Contains(target, "://") {
		u = "https://" + r.host + "/v2/" + r.path + "/" + target
	}
	if body != nil && size == 0 {
		// net/http sends a body of length 0 chunked; read it (a verifyReader checks
		// it is empty) and send none.
		if n, err := io.Copy(io.Discard, body); err != nil || n != 0 {
			return nil, fmt.Errorf("%s: %s %s: body of %d bytes, want none: %v", r.Name(), method, redactString(u), n, err)
		}
		body = http.NoBody
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.Name(), err)
	}
	for k, vs := range hdr {
		req.Header[k] = vs
	}
	if body != nil {
		req.ContentLength = size
	}
	resp, err := c.Do(req)
	if err != nil {
		var unreachable *unreachableError
		if errors.As(err, &unreachable) {
			return nil, fmt.Errorf("%s: %w", r.Name(), unreachable)
		}
		return nil, fmt.Errorf("%s: %s %s: %w", r.Name(), method, redact(req.URL), err)
	}
	return resp, nil
}

func redactString(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return "(unparsable URL)"
	}
	return redact(u)
}

// redact drops the query (upload state tokens) from a URL shown in errors.
func redact(u *url.URL) string {
	c := *u
	c.RawQuery, c.User = "", nil
	return c.String()
}

// statusError describes an unexpected response; it consumes and closes the body.
func (r *remoteRepo) statusError(resp *http.Response, action, what string) error {
	defer drain(resp.Body)
	switch resp.StatusCode {
	case http.StatusUnauthorized, http.StatusForbidden:
		return r.authError(resp.StatusCode, action)
	case http.StatusNotFound:
		return fmt.Errorf("%s: %s: %w", r.Name(), what, ErrNotFound)
	}
	e := &Error{Repository: r.Name(), What: what, StatusCode: resp.StatusCode, Status: resp.Status}
	var body struct {
		Errors []ErrorCode
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if json.Unmarshal(b, &body) == nil {
		e.Errors = body.Errors
		if len(e.Errors) > maxErrorCodes {
			e.Errors = e.Errors[:maxErrorCodes]
		}
	}
	return e
}

// Resolve asks for the manifest tag points at (HEAD, falling back to GET when the registry
// does not send Docker-Content-Digest).
func (r *remoteRepo) Resolve(ctx context.Context, tag string) (v1.Descriptor, error) {
	if err := oci.ValidTag(tag); err != nil {
		return v1.Descriptor{}, fmt.Errorf("%s: %w", r.Name(), err)
	}
	hdr := http.Header{"Accept": {manifestAccept}}
	resp, err := r.do(ctx, r.pull, http.MethodHead, "manifests/"+tag, hdr, nil, 0)
	if err != nil {
		return v1.Descriptor{}, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v1.Descriptor{}, r.statusError(resp, "pull", "tag "+tag)
	}
	desc := v1.Descriptor{MediaType: mediaType(resp), Size: resp.ContentLength}
	if dh := resp.Header.Get("Docker-Content-Digest"); dh != "" && desc.Size > 0 {
		d, err := local.ParseDigest(dh)
		if err != nil {
			return v1.Descriptor{}, fmt.Errorf("%s: tag %s: registry sent %v", r.Name(), tag, err)
		}
		desc.Digest = d
		return desc, nil
	}
	b, mt, err := r.getManifest(ctx, tag, "tag "+tag)
	if err != nil {
		return v1.Descriptor{}, err
	}
	return v1.Descriptor{MediaType: mt, Digest: digest.FromBytes(b), Size: int64(len(b))}, nil
}

func mediaType(resp *http.Response) string {
	mt, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	return strings.TrimSpace(mt)
}

// Manifest fetches a manifest by digest and checks its bytes against d.
func (r *remoteRepo) Manifest(ctx context.Context, d v1.Descriptor) ([]byte, error) {
	if err := checkDesc(d); err != nil {
		return nil, fmt.Errorf("%s: manifest: %w", r.Name(), err)
	}
	b, _, err := r.getManifest(ctx, string(d.Digest), "manifest "+string(d.Digest))
	if err != nil {
		return nil, err
	}
	if err := checkBytes(b, d, "manifest"); err != nil {
		return nil, fmt.Errorf("%s: %w", r.Name(), err)
	}
	return b, nil
}

func (r *remoteRepo) getManifest(ctx context.Context, reference, what string) ([]byte, string, error) {
	resp, err := r.do(ctx, r.pull, http.MethodGet, "manifests/"+reference, http.Header{"Accept": {manifestAccept}}, nil, 0)
	if err != nil {
		return nil, "", err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, "", r.statusError(resp, "pull", what)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxManifest+1))
	if err != nil {
		return nil, "", fmt.Errorf("%s: reading %s: %w", r.Name(), what, err)
	}
	if len(b) > maxManifest {
		return nil, "", fmt.Errorf("%s: %s is larger than %d bytes, the limit for manifests", r.Name(), what, maxManifest)
	}
	return b, mediaType(resp), nil
}

// checkDesc accepts sha256 digests and non-negative sizes only.
func checkDesc(d v1.Descriptor) error {
	if _, err := local.ParseDigest(string(d.Digest)); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidRef, err)
	}
	if d.Size < 0 {
		return fmt.Errorf("descriptor %s has negative size %d", d.Digest, d.Size)
	}
	return nil
}

// checkBytes verifies b against d's digest, and its size when d states one.
func checkBytes(b []byte, d v1.Descriptor, what string) error {
	if d.Size == 0 {
		d.Size = int64(len(b))
	}
	if err := oci.CheckBytes(b, d); err != nil {
		return fmt.Errorf("%s %w", what, err)
	}
	return nil
}

// Blob opens a blob. Opening retries transient failures (in the transport); a connection
// that breaks mid-stream is resumed with a Range request (resumeBody); the reader verifies
// size and digest as it goes and fails at EOF rather than pass off wrong bytes (verifyReader).
func (r *remoteRepo) Blob(ctx context.Context, d v1.Descriptor) (io.ReadCloser, error) {
	if err := checkDesc(d); err != nil {
		return nil, fmt.Errorf("%s: blob: %w", r.Name(), err)
	}
	resp, err := r.do(ctx, r.pull, http.MethodGet, "blobs/"+string(d.Digest), nil, nil, 0)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, r.statusError(resp, "pull", "blob "+string(d.Digest))
	}
	if resp.ContentLength > d.Size {
		resp.Body.Close()
		return nil, fmt.Errorf("%s: blob %s: %w: the registry sends %d bytes, its descriptor states %d", r.Name(), d.Digest, ErrSizeMismatch, resp.ContentLength, d.Size)
	}
	body := &resumeBody{ctx: ctx, r: r, d: d, rc: resp.Body}
	return newVerifiedBlob(body, d), nil
}

// HasBlob asks with HEAD. A registry reporting another size for the digest is an error.
func (r *remoteRepo) HasBlob(ctx context.Context, d v1.Descriptor) (bool, error) {
	return r.hasBlob(ctx, r.pull, d)
}

func (r *remoteRepo) hasBlob(ctx context.Context, c *http.Client, d v1.Descriptor) (bool, error) {
	if err := checkDesc(d); err != nil {
		return false, fmt.Errorf("%s: blob: %w", r.Name(), err)
	}
	resp, err := r.do(ctx, c, http.MethodHead, "blobs/"+string(d.Digest), nil, nil, 0)
	if err != nil {
		return false, err
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		if resp.ContentLength > 0 && resp.ContentLength != d.Size {
			return false, fmt.Errorf("%s: blob %s: %w: the registry has %d bytes, the descriptor states %d", r.Name(), d.Digest, ErrSizeMismatch, resp.ContentLength, d.Size)
		}
		return true, nil
	case http.StatusNotFound:
		return false, nil
	}
	return false, r.statusError(resp, "pull", "blob "+string(d.Digest))
}

// Referrers asks the registry's referrers API (OCI distribution 1.1,
// GET /v2/<name>/referrers/<digest>) for the manifests whose subject is subject. A
// registry without it, one answering 404, 400 or 406 or with something other than an
// image index (as go-containerregistry decides), gives an error wrapping ErrNotFound:
// the caller then reads the referrers tag (sign.FallbackTag). Only the first page of a
// paginated answer is read, as go-containerregistry and cosign read it.
func (r *remoteRepo) Referrers(ctx context.Context, subject digest.Digest) ([]v1.Descriptor, error) {
	if _, err := local.ParseDigest(string(subject)); err != nil {
		return nil, fmt.Errorf("%s: referrers: %w: %v", r.Name(), ErrInvalidRef, err)
	}
	what := "referrers of " + string(subject)
	resp, err := r.do(ctx, r.pull, http.MethodGet, "referrers/"+string(subject), http.Header{"Accept": {v1.MediaTypeImageIndex}}, nil, 0)
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK:
		if mediaType(resp) == v1.MediaTypeImageIndex {
			break
		}
		fallthrough
	case http.StatusNotFound, http.StatusBadRequest, http.StatusNotAcceptable:
		drain(resp.Body)
		return nil, fmt.Errorf("%s: %s: the registry has no referrers API (%s): %w", r.Name(), what, resp.Status, ErrNotFound)
	default:
		return nil, r.statusError(resp, "pull", what)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxManifest+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading %s: %w", r.Name(), what, err)
	}
	if len(b) > maxManifest {
		return nil, fmt.Errorf("%s: %s: the answer is larger than %d bytes", r.Name(), what, maxManifest)
	}
	var idx v1.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("%s: %s: the registry sent an index that does not decode: %v", r.Name(), what, err)
	}
	for _, d := range idx.Manifests {
		if err := checkDesc(d); err != nil {
			return nil, fmt.Errorf("%s: %s: the registry sent %w", r.Name(), what, err)
		}
	}
	return idx.Manifests, nil
}

// artifactTypeOf reads the artifactType of a manifest, if any.
func artifactTypeOf(raw []byte) string {
	var m struct {
		ArtifactType string `json:"artifactType"`
	}
	if json.Unmarshal(raw, &m) != nil {
		return ""
	}
	return m.ArtifactType
}
