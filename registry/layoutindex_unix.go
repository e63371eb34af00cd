//go:build unix

package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	v1 "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/pylayer/pylayer/oci"
)

// setTag points tag at entry in the layout's index.json, replacing the entry that had the
// tag. It follows oci.Layout.Put's protocol exactly, so the two can update one layout at
// once: an exclusive flock on .index.json.lock, entries sorted by tag then digest, and an
// atomic rewrite (temporary file, fsync, rename, fsync of the directory).
//
// oci exports no way to tag a raw manifest (Put takes an Artifact), hence this copy; it
// belongs in oci as Layout.Tag.
func setTag(ctx context.Context, dir string, entry v1.Descriptor, tag string) error {
	f, err := os.OpenFile(filepath.Join(dir, ".index.json.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("opening lock file: %w", err)
	}
	defer f.Close() // releases the lock
	for wait := time.Millisecond; ; wait = min(2*wait, 50*time.Millisecond) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			return fmt.Errorf("locking %s: %w", f.Name(), err)
		}
		if err := sleep(ctx, wait); err != nil {
			return fmt.Errorf("waiting for lock %s: %w", f.Name(), err)
		}
	}

	b, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return fmt.Errorf("%w: %v", oci.ErrInvalidLayout, err)
	}
	var idx v1.Index
	if err := json.Unmarshal(b, &idx); err != nil || idx.SchemaVersion != 2 {
		return fmt.Errorf("%w: index.json is not an OCI image index (schemaVersion 2): %v", oci.ErrInvalidLayout, err)
	}
	kept := make([]v1.Descriptor, 0, len(idx.Manifests)+1)
	for _, m := range idx.Manifests {
		if m.Annotations[v1.AnnotationRefName] != tag {
			kept = append(kept, m)
		}
	}
	idx.Manifests = append(kept, entry)
	idx.MediaType = v1.MediaTypeImageIndex
	sort.SliceStable(idx.Manifests, func(i, j int) bool {
		ti, tj := idx.Manifests[i].Annotations[v1.AnnotationRefName], idx.Manifests[j].Annotations[v1.AnnotationRefName]
		if ti != tj {
			return ti < tj
		}
		return idx.Manifests[i].Digest < idx.Manifests[j].Digest
	})
	out, err := json.Marshal(idx)
	if err != nil {
		return fmt.Errorf("encoding index.json: %w", err)
	}
	return writeAtomic(dir, "index.json", out)
}

func writeAtomic(dir, name string, content []byte) error {
	tmp, err := os.CreateTemp(dir, ".tmp-"+name+"-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	_, err = tmp.Write(content)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", dir, err)
	}
	return nil
}
