package cache

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/pylayer/pylayer/internal/fsx"
	"github.com/pylayer/pylayer/oci"
	v1 "github.com/pylayer/pylayer/oci/spec/v1"
)

// maxMemBlobBytes: a blob up to this size is fetched into memory, not into a
// file under tmp/ that is written, read back and deleted (and, were a syncfs to
// catch it, flushed to disk for nothing). One install holds at most
// c.parallel of them. A variable for tests.
var maxMemBlobBytes int64 = 32 << 20

// pendingTree is a tree this install unpacked: complete and read-only under
// work (tree/ and its file list, files), not yet durable nor visible. Its tree
// lock is held until it is committed or discarded.
type pendingTree struct {
	i    int // its index in the manifest
	d    v1.Descriptor
	work string // tmp/tree-<hex>-*
	lock *fileLock
	recs []record // its file list, sorted by path
}

// discard removes a pending tree and frees its lock.
func (p *pendingTree) discard() {
	forceRemoveAll(p.work)
	p.lock.release()
}

// ensureTrees makes sure every blob has its tree, c.parallel at a time: a tree the
// cache has is linked into the layer being built (lb) as soon as it is found, and one
// this install unpacks is claimed in it. The first failure cancels the rest.
//
// Trees this install unpacks are returned pending: the caller merges them into the
// layer and makes them durable with one syncfs for the whole install
// (layerBuild.finish), instead of one per tree. Their locks are held until then, so that no other
// process unpacks them too; to hold locks without waiting for any (two
// installs each holding a tree the other waits for would deadlock), a tree
// whose lock is busy is skipped at first, and waited for only once this
// install's pending trees are committed on their own (in trees/sha256, linked into
// the layer like any tree the cache had) and their locks released.
func (c *Cache) ensureTrees(ctx context.Context, layers []v1.Descriptor, links bool, fetch Fetch, emit func(Event), lb *layerBuild) (pending []*pendingTree, err error) {
	var mu sync.Mutex
	defer func() {
		if err != nil {
			for _, p := range pending {
				p.discard()
			}
			pending = nil
		}
	}()
	var busy []int
	fl := c.startFlusher(ctx) // with c.lazy(), it never syncs
	order := largestFirst(layers)
	err = c.eachLayer(ctx, len(layers), func(ctx context.Context, k int) error {
		i := order[k]
		p, err := c.ensureTree(ctx, i, layers[i], links, fetch, emit, lb, false)
		if p != nil {
			fl.kick()
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case errors.Is(err, errBusy):
			busy = append(busy, i)
		case err != nil:
			return fmt.Errorf("blob %s (%s): %w", layers[i].Digest, titleOf(layers[i]), err)
		case p != nil:
			pending = append(pending, p)
		}
		return nil
	})
	fl.stop()
	if err != nil || len(busy) == 0 {
		return pending, err
	}
	// Another process is unpacking some of these trees: commit ours, so that it
	// can go on if it waits for them, then wait for its trees (or make those
	// whose maker gave up), each made durable on its own.
	p := pending
	pending = nil
	if err := c.commitTrees(ctx, p, emit, lb); err != nil {
		return nil, err
	}
	return nil, c.eachLayer(ctx, len(busy), func(ctx context.Context, k int) error {
		l := layers[busy[k]]
		p, err := c.ensureTree(ctx, busy[k], l, links, fetch, emit, lb, true)
		if err == nil && p != nil {
			err = c.commitTrees(ctx, []*pendingTree{p}, emit, lb)
		}
		if err != nil {
			return fmt.Errorf("blob %s (%s): %w", l.Digest, titleOf(l), err)
		}
		return nil
	})
}

// largestFirst is the order in which an install takes its blobs: the largest
// first (longest job first), so that the last to be unpacked are small ones and
// no core is left alone with a big wheel while the others have nothing to do;
// and each blob fits a buffer of one fetched before it. Ties keep the
// manifest's order. A conflict is refused whatever the order: the second blob
// to claim a path fails, naming both in the manifest's order.
func largestFirst(layers []v1.Descriptor) []int {
	order := make([]int, len(layers))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return layers[order[a]].Size > layers[order[b]].Size })
	return order
}

// flusher starts writing back what an install wrote while it goes on
// unpacking, so that the syncfs that makes the install durable
// (layerBuild.finish) finds little left to write instead of waiting, CPUs
// idle, for all of it: each kick starts a syncfs unless one runs, in which
// case one more follows it. Its syncfs calls are for speed only: nothing is
// renamed into view after them, and their errors are left to that one's.
type flusher struct {
	kicks chan struct{}
	done  chan struct{}
}

func (c *Cache) startFlusher(ctx context.Context) *flusher {
	f := &flusher{kicks: make(chan struct{}, 1), done: make(chan struct{})}
	go func() {
		defer close(f.done)
		for range f.kicks {
			if durable && !c.lazy() && ctx.Err() == nil {
				fsx.SyncFS(ctx, c.tmpDir())
			}
		}
	}()
	return f
}

func (f *flusher) kick() {
	select {
	case f.kicks <- struct{}{}:
	default: // one is queued already
	}
}

// stop waits for the syncfs under way, if any.
func (f *flusher) stop() {
	close(f.kicks)
	<-f.done
}

// eachLayer runs f for 0..n-1, c.parallel at a time, starting them in that order (an
// install's order is largestFirst's); the first failure cancels the rest and is
// returned (the cause, not the cancellations it caused).
func (c *Cache) eachLayer(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make([]error, n)
	var next atomic.Int64 // the next index to start: workers take them in order
	var wg sync.WaitGroup
	for range min(max(c.parallel, 1), n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := ctx.Err(); err != nil {
					errs[i] = err
					continue
				}
				if errs[i] = f(ctx, i); errs[i] != nil {
					cancel()
				}
			}
		}()
	}
	wg.Wait()
	var first error
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// hasTree reports whether the tree of blob hex is in the cache: a directory of its
// own, or a home in a layer (see homes.go). A home whose layer is not there is a
// leftover of an install that died before renaming its layer into place: no tree
// (the next install replaces it, GC removes it). A tree without its file list is
// damaged (the list is renamed into place first), which needs a repair, not a
// second unpack over it.
func (c *Cache) hasTree(hex string) (bool, error) {
	fi, err := os.Lstat(c.treeDir(hex))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		if _, installed, err := c.homeInstalled(hex); err != nil || !installed {
			return false, err
		}
	case !fi.IsDir():
		return false, fmt.Errorf("%w: %s is a %s: run `pylayer doctor --repair`", ErrInvalidCache, c.treeDir(hex), kindOf(fi.Mode()))
	}
	if _, err := os.Lstat(c.treeFiles(hex)); err != nil {
		return false, fmt.Errorf("%w: tree %s has no file list (%v): run `pylayer doctor --repair`", ErrInvalidCache, hex, err)
	}
	return true, nil
}

// ensureTree links the tree of blob i into lb if the cache has it; else it fetches
// and verifies the blob, unpacks and lists it in tmp/tree-<hex>-*, claims its paths
// in lb and returns it pending (not yet read-only nor durable, its lock held).
// Unless wait is set, a busy tree lock is errBusy.
func (c *Cache) ensureTree(ctx context.Context, i int, d v1.Descriptor, links bool, fetch Fetch, emit func(Event), lb *layerBuild, wait bool) (*pendingTree, error) {
	hex := d.Digest.Encoded()
	cached := func() (*pendingTree, error) {
		emit(Event{Blob: d.Digest, Title: titleOf(d), Total: d.Size, Done: true, Cached: true})
		_, release, err := lb.slot(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
		return nil, lb.add(ctx, i, c.treeDir(hex), nil)
	}
	if ok, err := c.hasTree(hex); err != nil || ok {
		if err != nil {
			return nil, err
		}
		fixTop(c.treeDir(hex))
		return cached()
	}
	l, err := acquire(ctx, c.lockPath("tree", hex), lockMode{exclusive: true, wait: wait, create: true})
	if err != nil {
		return nil, err
	}
	if ok, err := c.hasTree(hex); err != nil || ok { // unpacked while we waited
		l.release()
		if err != nil {
			return nil, err
		}
		return cached()
	}
	p := &pendingTree{i: i, d: d, lock: l}
	if p.work, err = os.MkdirTemp(c.tmpDir(), "tree-"+hex+"-*"); err != nil {
		l.release()
		return nil, fmt.Errorf("creating work directory: %w", err)
	}
	if err := c.makeTree(ctx, i, p, links, fetch, emit, lb); err != nil {
		p.discard()
		return nil, err
	}
	return p, nil
}

// makeTree fetches, verifies and unpacks p's blob into p.work, writes its file
// list and claims its paths in lb. Its directories stay writable: finish renames
// them into the layer, which needs write access to a directory that changes parent.
func (c *Cache) makeTree(ctx context.Context, i int, p *pendingTree, links bool, fetch Fetch, emit func(Event), lb *layerBuild) error {
	blob, err := c.fetchBlob(ctx, p.d, fetch, p.work, emit, lb.buffers)
	if err != nil {
		return err
	}
	defer blob.Close()
	testHook("fetched")
	// Fetching waits on the registry; from here on the work is the CPU's (and the
	// page cache's): while one slot per core unpacks, the other workers fetch.
	scratch, release, err := lb.slot(ctx)
	if err != nil {
		return err
	}
	defer release()
	testHook("unpacking")
	tree := filepath.Join(p.work, "tree")
	recs, err := unpack(ctx, blob, p.d.MediaType, tree, c.limits, links, scratch)
	if err != nil {
		return err
	}
	testHook("unpacked")
	list, err := marshalFiles(p.d.Digest, recs)
	if err != nil {
		return err
	}
	// Not fsynced: the syncfs of commit covers it, before it is renamed into view.
	if err := writeFileMode(filepath.Join(p.work, "files"), list, modeFile, false); err != nil {
		return fmt.Errorf("writing the file list: %w", err)
	}
	p.recs = recs
	return lb.claim(i, recs)
}

// makeDurable makes pending trees and the layer in tmp/ (its manifest digest in hex, or
// "") safe to rename into view: one syncfs, or with c.lazy() a record of them.
func (c *Cache) makeDurable(ctx context.Context, pending []*pendingTree, layer string) error {
	if c.lazy() {
		return c.recordUnsynced(ctx, pending, layer)
	}
	return syncFS(ctx, c.tmpDir()) // the trees' work directories too: one file system
}

// commitTrees makes pending trees read-only and durable with one syncfs, renames
// each into trees/sha256 as a tree of its own (its file list first), fsyncs that
// directory, frees their locks, and links each into lb. On error the trees not yet
// in place are discarded.
func (c *Cache) commitTrees(ctx context.Context, pending []*pendingTree, emit func(Event), lb *layerBuild) error {
	if len(pending) == 0 {
		return nil
	}
	var err error
	for _, p := range pending {
		if err == nil {
			err = sealDirs(filepath.Join(p.work, "tree"), dirsOf(p.recs))
		}
	}
	if err == nil {
		err = c.makeDurable(ctx, pending, "")
	}
	if err != nil {
		for _, p := range pending {
			p.discard()
		}
		return err
	}
	if err := c.placeTrees(ctx, pending, emit); err != nil {
		return err
	}
	for _, p := range pending {
		if err := lb.link(ctx, p.i, c.treeDir(p.d.Digest.Encoded()), p.recs); err != nil {
			return err
		}
	}
	return nil
}

// placeTrees renames durable pending trees into place, fsyncs trees/sha256,
// and frees their locks; on error the trees not yet in place are discarded.
func (c *Cache) placeTrees(ctx context.Context, pending []*pendingTree, emit func(Event)) error {
	var err error
	placed := pending[:0:0]
	for _, p := range pending {
		if err == nil {
			if err = c.placeTree(p); err == nil {
				placed = append(placed, p)
				continue
			}
			err = fmt.Errorf("blob %s (%s): %w", p.d.Digest, titleOf(p.d), err)
		}
		p.discard()
	}
	if c.lazy() { // recorded: a crash of the machine loses the renames, or they are removed
	} else if serr := syncDir(ctx, filepath.Dir(c.treeDir("x"))); err == nil {
		err = serr
	}
	for _, p := range placed {
		forceRemoveAll(p.work) // empty now
		p.lock.release()
		if err == nil {
			emit(Event{Blob: p.d.Digest, Title: titleOf(p.d), Bytes: p.d.Size, Total: p.d.Size, Done: true})
		}
	}
	return err
}

func (c *Cache) placeTree(p *pendingTree) error {
	hex := p.d.Digest.Encoded()
	if err := os.Rename(filepath.Join(p.work, "files"), c.treeFiles(hex)); err != nil {
		return fmt.Errorf("moving the file list into place: %w", err)
	}
	testHook("listed")
	if err := moveSealed(filepath.Join(p.work, "tree"), c.treeDir(hex)); err != nil {
		return fmt.Errorf("moving the tree into place: %w", err)
	}
	return nil
}

// fetchBlob fetches blob d, checking its size and sha256 on the way
// (oci.VerifyReader, unless the reader is a Verifier of d), and returns it once
// verified: in memory when it is small, else from a file in work.
func (c *Cache) fetchBlob(ctx context.Context, d v1.Descriptor, fetch Fetch, work string, emit func(Event), bufs *buffers) (io.ReadCloser, error) {
	rc, err := fetch(ctx, d)
	if err != nil {
		return nil, fmt.Errorf("fetching: %w", err)
	}
	defer rc.Close()
	var src io.Reader = &progressReader{ctx: ctx, r: rc, emit: emit, ev: Event{Blob: d.Digest, Title: titleOf(d), Total: d.Size}}
	if v, ok := rc.(Verifier); !ok || v.VerifiesDescriptor().Digest != d.Digest || v.VerifiesDescriptor().Size != d.Size {
		src = oci.NewVerifyReader(src, d)
	}
	src = io.LimitReader(src, d.Size+1) // a Verifier never yields more; nothing else gets past the VerifyReader
	var w interface {
		io.Writer
		io.ReaderFrom
	}
	var buf *bytes.Buffer
	var f *os.File
	if d.Size <= maxMemBlobBytes {
		buf = bufs.get()
		buf.Grow(int(d.Size) + bytes.MinRead)
		w = buf
	} else {
		if f, err = os.OpenFile(filepath.Join(work, "blob"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err != nil {
			return nil, err
		}
		w = f
	}
	n, err := w.ReadFrom(src)
	if err == nil && n != d.Size {
		err = fmt.Errorf("%s: %w: %d bytes, its descriptor states %d", d.Digest, oci.ErrSizeMismatch, n, d.Size)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		if buf != nil {
			bufs.put(buf)
		}
		return nil, fmt.Errorf("fetching: %w", err)
	}
	if buf != nil {
		return &blobMem{Reader: bytes.NewReader(buf.Bytes()), buf: buf, bufs: bufs}, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return &blobFile{Reader: bufio.NewReaderSize(f, 1<<20), f: f}, nil
}

// buffers holds the buffers of one install's blobs fetched into memory once
// they are unpacked, so that the next blob reuses one: no zeroing and no page
// faults of a fresh 4 MB buffer per wheel. It keeps as many as the install
// fetches at once, and dies with the install, where a sync.Pool (before) was
// emptied by GCs (about four a pull of the bench set) and kept buffers past the
// install in a long-lived process. Blobs taken largest first fit the buffers of
// those before them. What growing buffers still costs a pull (about 2% of its
// CPU in a profile of the bench set, as before) is the first touch of the first
// buffers, which a new process pays either way.
type buffers struct{ free chan *bytes.Buffer }

func newBuffers(n int) *buffers { return &buffers{free: make(chan *bytes.Buffer, n)} }

// get returns an empty buffer, reused if one is free.
func (b *buffers) get() *bytes.Buffer {
	select {
	case buf := <-b.free:
		buf.Reset()
		return buf
	default:
		return new(bytes.Buffer)
	}
}

// put keeps buf for the next get, unless as many are kept already.
func (b *buffers) put(buf *bytes.Buffer) {
	select {
	case b.free <- buf:
	default:
	}
}

// blobMem reads a blob fetched into memory; Close returns its buffer.
type blobMem struct {
	*bytes.Reader
	buf  *bytes.Buffer
	bufs *buffers
}

// Bytes returns the blob's unread bytes (all of them, as unpack reads nothing
// before it asks), without a copy.
func (b *blobMem) Bytes() []byte { return b.buf.Bytes()[b.buf.Len()-b.Len():] }

func (b *blobMem) Close() error {
	if b.buf != nil {
		b.Reset(nil)
		b.bufs.put(b.buf)
		b.buf = nil
	}
	return nil
}

// blobFile reads a fetched blob back from its file, removing the file on Close.
type blobFile struct {
	io.Reader
	f *os.File
}

func (b *blobFile) Close() error {
	err := b.f.Close()
	os.Remove(b.f.Name())
	return err
}

// progressReader reports fetched bytes about every MiB and honours ctx.
type progressReader struct {
	ctx  context.Context
	r    io.Reader
	emit func(Event)
	ev   Event
	last int64
}

func (p *progressReader) Read(b []byte) (int, error) {
	if err := p.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := p.r.Read(b)
	p.ev.Bytes += int64(n)
	if p.ev.Bytes-p.last >= 1<<20 {
		p.last = p.ev.Bytes
		p.emit(p.ev)
	}
	return n, err
}
