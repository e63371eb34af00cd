package build

import (
	"context"
	"os"
	"path/filepath"

	"github.com/pylayer/pylayer/internal/logctx"
	"github.com/pylayer/pylayer/layers/lock"
)

// A fetch is a wheel being downloaded into the wheelhouse.
type fetch struct {
	done chan struct{} // closed when it ended
	path string
	err  error
}

// Prefetch starts downloading, in the background, the wheels of l missing from the
// wheelhouse, a few at a time; Wheel waits for one that is under way instead of fetching
// it again. Stamp calls it, so that the wheels come while the interpreter starts. A
// failed prefetch is only logged: Wheel tries again and reports it.
func (b *Builder) Prefetch(ctx context.Context, l *lock.Lock) {
	if b.Fetcher == nil {
		return
	}
	var todo []lock.Package
	for _, p := range l.Packages {
		if _, ok := b.inWheelhouse(p); !ok && validName(p.Filename) == nil {
			todo = append(todo, p)
		}
	}
	sem := make(chan struct{}, downloads)
	for _, p := range todo {
		f, started := b.startFetch(p)
		if !started {
			continue
		}
		go func() {
			sem <- struct{}{}
			f.path, f.err = b.download(ctx, p)
			<-sem
			if f.err != nil {
				logctx.From(ctx).Debug("prefetch failed", "wheel", p.Filename, "err", f.err)
			}
			b.endFetch(p, f)
		}()
	}
}

// startFetch registers a fetch of p unless one is under way; it returns that one, and
// whether it is new.
func (b *Builder) startFetch(p lock.Package) (*fetch, bool) {
	b.fetchMu.Lock()
	defer b.fetchMu.Unlock()
	if f, ok := b.fetches[p.SHA256]; ok {
		return f, false
	}
	if b.fetches == nil {
		b.fetches = map[string]*fetch{}
	}
	f := &fetch{done: make(chan struct{})}
	b.fetches[p.SHA256] = f
	return f, true
}

func (b *Builder) endFetch(p lock.Package, f *fetch) {
	b.fetchMu.Lock()
	delete(b.fetches, p.SHA256)
	b.fetchMu.Unlock()
	close(f.done)
}

// underWay is the fetch of p under way, if any.
func (b *Builder) underWay(p lock.Package) *fetch {
	b.fetchMu.Lock()
	defer b.fetchMu.Unlock()
	return b.fetches[p.SHA256]
}

// inWheelhouse is where p's wheel is in the wheelhouse, and whether it is there.
func (b *Builder) inWheelhouse(p lock.Package) (string, bool) {
	path := filepath.Join(b.Root, "wheels", p.SHA256, p.Filename)
	fi, err := os.Stat(path)
	return path, err == nil && fi.Size() == p.Size
}

// download fetches p's wheel into the wheelhouse, hash checked.
func (b *Builder) download(ctx context.Context, p lock.Package) (string, error) {
	path := filepath.Join(b.Root, "wheels", p.SHA256, p.Filename)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	f, err := b.locate(ctx, p)
	if err != nil {
		return "", err
	}
	if err := b.Fetcher.Download(ctx, f, path); err != nil {
		return "", err // index.Download names the file already
	}
	return path, nil
}
