package index

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/pylayer/pylayer/internal/fsx"
	"github.com/pylayer/pylayer/internal/logctx"
)

// metadataCache keeps core metadata on disk as <dir>/sha256/<hex>, where hex is the
// sha256 the index gives for the distribution file the metadata belongs to, however it
// was read (a PEP 658 file, ranges of the wheel, the whole wheel). A nil cache keeps
// nothing. It is a cache: a file it cannot read or write is a miss, logged at debug
// level, never an error of Metadata.
//
// The key is the file's hash, but metadata read through ranges cannot be checked against
// it (only a whole download can): like uv, the cache trusts the server that answered the
// ranges. Metadata with a PEP 658 hash is checked against that hash on every read.
type metadataCache struct {
	dir   string
	limit int64
}

func (m *metadataCache) path(f File) (string, bool) {
	if m == nil || !sha256HexRe().MatchString(f.SHA256) {
		return "", false
	}
	return filepath.Join(m.dir, "sha256", f.SHA256), true
}

func (m *metadataCache) get(ctx context.Context, f File) ([]byte, bool) {
	p, ok := m.path(f)
	if !ok {
		return nil, false
	}
	file, err := os.Open(p)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			logctx.From(ctx).Debug("metadata cache unreadable", "file", f.Filename, "err", err.Error())
		}
		return nil, false
	}
	defer file.Close()
	md, err := readCapped(file, m.limit)
	if err != nil {
		logctx.From(ctx).Debug("metadata cache unreadable", "file", f.Filename, "err", err.Error())
		return nil, false
	}
	if f.MetadataSHA256 != "" {
		if sum := sha256.Sum256(md); hex.EncodeToString(sum[:]) != f.MetadataSHA256 {
			logctx.From(ctx).Debug("cached metadata does not have the index's metadata sha256", "file", f.Filename)
			return nil, false
		}
	}
	return md, true
}

func (m *metadataCache) put(ctx context.Context, f File, md []byte) {
	p, ok := m.path(f)
	if !ok {
		return
	}
	err := os.MkdirAll(filepath.Dir(p), 0o755)
	if err == nil {
		err = fsx.WriteFile(ctx, p, md, 0o644)
	}
	if err != nil {
		logctx.From(ctx).Debug("metadata cache not written", "file", f.Filename, "err", err.Error())
	}
}
