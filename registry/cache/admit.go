package cache

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/pylayer/pylayer/internal/fsx"
	"github.com/pylayer/pylayer/oci"
	"github.com/pylayer/pylayer/oci/digest"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// Admission records how a digest entered the host cache: through which repository, by
// which trust rule, and unsigned by that rule's explicit choice or signed by which keys.
// The cache only keeps records; the caller decides, on every use, whether the current
// policy still accepts one.
type Admission struct {
	Repository string    `json:"repository"` // normalized: "reg.example/team/pylayer", "oci:/abs/dir"
	Rule       string    `json:"rule"`       // the match of the trust rule that admitted it
	Unsigned   bool      `json:"unsigned,omitempty"`
	Signers    []Signer  `json:"signers,omitempty"` // when not Unsigned: at least one
	Time       time.Time `json:"time"`              // the last time it was admitted so
}

// Signer is a trusted key that signed an admitted artifact.
type Signer struct {
	KeyID           string `json:"key_id"`                     // "sha256:<hex>" of the public key's PKIX DER
	DockerReference string `json:"docker_reference,omitempty"` // the repository its signature claims
}

// Limits of an admission record file.
const (
	admissionsVersion  = 1
	maxAdmissions      = 32 // distinct admissions of one digest; the oldest goes first
	maxAdmissionsBytes = 1 << 20
	maxAdmissionField  = 1024 // bytes of a repository, rule or docker reference
)

// admissionsFile is <root>/admissions/sha256/<hex>.json.
type admissionsFile struct {
	Version    int         `json:"version"`
	Digest     string      `json:"digest"`
	Admissions []Admission `json:"admissions"`
}

func (c *Cache) admissionsPath(hex string) string {
	return filepath.Join(c.root, "admissions", "sha256", hex+".json")
}

// Admit records that digest d (a layer or interpreter artifact) was admitted as a says,
// beside what the cache already records of d: an admission through another repository,
// rule or set of keys is added, the same one again only has its Time refreshed (a zero
// Time means now). At most 32 are kept, the oldest dropped first. The record is replaced
// atomically (written aside, fsynced, renamed), under a lock, so concurrent admissions by
// several processes are all kept and a crash leaves the old record or the new one. A
// damaged record is replaced by one holding a alone.
func (c *Cache) Admit(ctx context.Context, d digest.Digest, a Admission) error {
	if err := checkDigest(d); err != nil {
		return fmt.Errorf("recording the admission: %w", err)
	}
	if a.Time.IsZero() {
		a.Time = time.Now()
	}
	a.Time = a.Time.UTC()
	a.Signers = slices.Clone(a.Signers)
	slices.SortFunc(a.Signers, func(x, y Signer) int {
		return strings.Compare(x.KeyID+"\n"+x.DockerReference, y.KeyID+"\n"+y.DockerReference)
	})
	a.Signers = slices.Compact(a.Signers)
	if err := checkAdmission(a); err != nil {
		return fmt.Errorf("recording the admission of %s: %w", d, err)
	}
	hex := d.Encoded()
	l, err := acquire(ctx, c.lockPath("admit", hex), lockMode{exclusive: true, wait: true, create: true})
	if err != nil {
		return fmt.Errorf("recording the admission of %s: %w", d, err)
	}
	defer l.release()
	all, err := c.readAdmissions(hex)
	if err != nil && !errors.Is(err, ErrInvalidCache) {
		return fmt.Errorf("recording the admission of %s: %w", d, err)
	}
	if i := slices.IndexFunc(all, func(b Admission) bool { return sameAdmission(a, b) }); i >= 0 {
		all[i] = a
	} else {
		all = append(all, a)
	}
	if len(all) > maxAdmissions {
		slices.SortStableFunc(all, func(x, y Admission) int { return y.Time.Compare(x.Time) })
		all = all[:maxAdmissions]
	}
	b, err := json.Marshal(admissionsFile{Version: admissionsVersion, Digest: string(d), Admissions: all})
	if err != nil {
		return err
	}
	if err := c.replaceFile(ctx, c.admissionsPath(hex), b); err != nil {
		return fmt.Errorf("recording the admission of %s: %w", d, err)
	}
	return nil
}

// sameAdmission: a and b came through one repository the same way (unsigned, or signed by
// the same keys), so one replaces the other.
func sameAdmission(a, b Admission) bool {
	if a.Repository != b.Repository || a.Unsigned != b.Unsigned || len(a.Signers) != len(b.Signers) {
		return false
	}
	for i := range a.Signers {
		if a.Signers[i].KeyID != b.Signers[i].KeyID {
			return false
		}
	}
	return true
}

// Admissions returns what the cache recorded of how digest d was admitted, oldest first;
// none (and no error) when it has no record. A record it cannot read is an error wrapping
// ErrInvalidCache. It needs no network and takes no lock: records are replaced atomically.
func (c *Cache) Admissions(ctx context.Context, d digest.Digest) ([]Admission, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := checkDigest(d); err != nil {
		return nil, fmt.Errorf("reading admissions: %w", err)
	}
	all, err := c.readAdmissions(d.Encoded())
	if err != nil {
		return nil, fmt.Errorf("%w: pull %s again to record it anew", err, d)
	}
	return all, nil
}

func (c *Cache) readAdmissions(hex string) ([]Admission, error) {
	f, err := os.Open(c.admissionsPath(hex))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the admission record of sha256:%s: %w", hex, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxAdmissionsBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading the admission record of sha256:%s: %w", hex, err)
	}
	return parseAdmissions(b, digest.NewDigestFromEncoded(digest.SHA256, hex))
}

// parseAdmissions decodes and checks the admission record of d strictly.
func parseAdmissions(b []byte, d digest.Digest) ([]Admission, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: the admission record of %s: %s", ErrInvalidCache, d, fmt.Sprintf(format, args...))
	}
	if len(b) > maxAdmissionsBytes {
		return nil, bad("more than %d bytes", maxAdmissionsBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f admissionsFile
	if err := dec.Decode(&f); err != nil {
		return nil, bad("%v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, bad("trailing data")
	}
	switch {
	case f.Version != admissionsVersion:
		return nil, bad("version %d, want %d", f.Version, admissionsVersion)
	case f.Digest != string(d):
		return nil, bad("it is the record of %q", f.Digest)
	case len(f.Admissions) == 0 || len(f.Admissions) > maxAdmissions:
		return nil, bad("%d admissions, want 1 to %d", len(f.Admissions), maxAdmissions)
	}
	for i, a := range f.Admissions {
		if err := checkAdmission(a); err != nil {
			return nil, bad("admission %d: %v", i, err)
		}
	}
	return f.Admissions, nil
}

func checkAdmission(a Admission) error {
	if err := checkField("repository", a.Repository, true); err != nil {
		return err
	}
	if err := checkField("rule", a.Rule, true); err != nil {
		return err
	}
	if a.Time.IsZero() {
		return errors.New("no time")
	}
	if a.Unsigned != (len(a.Signers) == 0) {
		return fmt.Errorf("through %s: unsigned is %v with %d signers: an admission is unsigned or signed by at least one key", a.Repository, a.Unsigned, len(a.Signers))
	}
	for _, s := range a.Signers {
		if hex, ok := strings.CutPrefix(s.KeyID, "sha256:"); !ok || !isHex64(hex) {
			return fmt.Errorf("key ID %q: want sha256:<64 hex digits>", s.KeyID)
		}
		if err := checkField("docker reference", s.DockerReference, false); err != nil {
			return err
		}
	}
	return nil
}

func checkField(what, s string, required bool) error {
	switch {
	case s == "" && required:
		return fmt.Errorf("no %s", what)
	case len(s) > maxAdmissionField:
		return fmt.Errorf("%s of %d bytes, the limit is %d", what, len(s), maxAdmissionField)
	case !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("%s %q: not printable UTF-8", what, s)
	}
	return nil
}

// removeAdmissions removes the admission record of hex, under its lock.
func (c *Cache) removeAdmissions(ctx context.Context, hex string) error {
	l, err := acquire(ctx, c.lockPath("admit", hex), lockMode{exclusive: true, wait: true, create: true})
	if err != nil {
		return err
	}
	if err := os.Remove(c.admissionsPath(hex)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		l.release()
		return fmt.Errorf("removing the admission record of sha256:%s: %w", hex, err)
	}
	if err := c.removeUseRecord(hex); err != nil {
		l.release()
		return err
	}
	l.removeAndRelease()
	return nil
}

// removeOrphanAdmissions removes records whose layer is gone (a layer removed between an
// install and its admission, or by an older pylayer), use records too. A record being
// written is left.
func (c *Cache) removeOrphanAdmissions(ctx context.Context) {
	hexes, _ := hexNames(filepath.Dir(c.admissionsPath("x")), ".use.json", ".json")
	for _, hex := range hexes {
		if _, ok := c.Layer(digest.NewDigestFromEncoded(digest.SHA256, hex)); ok {
			continue
		}
		l, err := acquire(ctx, c.lockPath("admit", hex), lockMode{exclusive: true, create: true})
		if err != nil {
			continue // busy: being admitted now
		}
		if _, ok := c.Layer(digest.NewDigestFromEncoded(digest.SHA256, hex)); ok {
			l.release()
			continue
		}
		os.Remove(c.admissionsPath(hex))
		os.Remove(c.useRecordPath(hex))
		l.removeAndRelease()
	}
}

// Meta returns the manifest and config blob (the lock, or an interpreter's config) that
// layer d was installed from, as its root keeps them, checked against d: the manifest
// hashes to d and names the config's digest and size. It needs no network.
func (c *Cache) Meta(ctx context.Context, d digest.Digest) (*v1.Manifest, []byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	root, ok := c.Layer(d)
	if !ok {
		return nil, nil, fmt.Errorf("layer %s: %w", d, ErrNotFound)
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: layer %s: %s: run `pylayer doctor --repair`, then pull it again", ErrInvalidCache, d, fmt.Sprintf(format, args...))
	}
	manifest, err := readCapped(filepath.Join(root, metaDir, metaManifest), 4<<20)
	if err != nil {
		return nil, nil, bad("%v", err)
	}
	if got := digest.FromBytes(manifest); got != d {
		return nil, nil, bad("its %s/%s hashes to %s", metaDir, metaManifest, got)
	}
	m, err := oci.ParseManifest(manifest)
	if err != nil {
		return nil, nil, bad("%v", err)
	}
	config, err := readCapped(filepath.Join(root, metaDir, metaLock), maxConfigBytes)
	if err != nil {
		return nil, nil, bad("%v", err)
	}
	if int64(len(config)) != m.Config.Size || digest.FromBytes(config) != m.Config.Digest {
		return nil, nil, bad("its %s/%s is not the config its manifest names (%s)", metaDir, metaLock, m.Config.Digest)
	}
	return m, config, nil
}

func readCapped(p string, limit int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: more than %d bytes", filepath.Base(p), limit)
	}
	return b, nil
}

// replaceFile atomically replaces dst with content (mode 0644): written in tmp/, fsynced,
// renamed into place, its directory fsynced.
func (c *Cache) replaceFile(ctx context.Context, dst string, content []byte) error {
	return fsx.WriteFileIn(ctx, c.tmpDir(), dst, content, 0o644)
}
