// Package watch tells when files change content, with inotify: rewritten
// in place, replaced by a rename, or swapped through a symlink, as
// Kubernetes does to the files of a mounted Secret or ConfigMap (each key
// is a symlink through "..data", itself a symlink to a timestamped
// directory that a rename replaces).
//
// It watches the directories that hold the files and their symlinks'
// targets, not the files: a watch on a file follows its inode, which a
// rename or a symlink swap leaves behind. Any event there about one of the
// files, or about a name starting with ".." (Kubernetes' ..data), starts a
// short debounce; then every file is read and hashed, and only a changed
// hash counts. A file that goes missing is a change too (and its return).
package watch

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maxFile bounds how much of a file is hashed: configs and certificates
// are far smaller.
const maxFile = 16 << 20

// mask is what a watched directory reports: writes, renames in and out,
// creations, deletions, metadata (a chmod may make a file readable), and
// the directory's own removal.
const mask = unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_ATTRIB | unix.IN_CREATE |
	unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF

// A Watcher calls its function when one of its files changes content.
type Watcher struct {
	debounce time.Duration
	onChange func(changed []string)
	fd       int      // the inotify instance
	file     *os.File // fd, for reads the runtime poller can interrupt
	poke     chan struct{}
	quit     chan struct{}
	wg       sync.WaitGroup

	mu       sync.Mutex // protects the rest
	closed   bool
	sums     map[string]sum             // each file's last content
	wds      map[int]string             // watch descriptor to directory
	dirs     map[string]int             // directory to watch descriptor
	interest map[string]map[string]bool // directory to the names that matter there
}

// sum is a file's content hash, or says it could not be read.
type sum struct {
	missing bool
	hash    [sha256.Size]byte
}

// New starts a Watcher with no files. After an event it waits until
// debounce has passed without another (at most five times debounce), then
// calls onChange with the files whose content changed, from its own
// goroutine.
func New(debounce time.Duration, onChange func(changed []string)) (*Watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, &os.SyscallError{Syscall: "inotify_init1", Err: err}
	}
	w := &Watcher{
		debounce: debounce,
		onChange: onChange,
		fd:       fd,
		file:     os.NewFile(uintptr(fd), "inotify"),
		poke:     make(chan struct{}, 1),
		quit:     make(chan struct{}),
		sums:     make(map[string]sum),
		wds:      make(map[int]string),
		dirs:     make(map[string]int),
		interest: make(map[string]map[string]bool),
	}
	w.wg.Go(w.read)
	w.wg.Go(w.settle)
	return w, nil
}

// Set makes paths (absolute) the files watched. A file watched before
// keeps the content it was last seen with; a new one is read now. The
// error lists directories that could not be watched (one that does not
// exist, say); the others are watched.
func (w *Watcher) Set(paths []string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return os.ErrClosed
	}
	sums := make(map[string]sum, len(paths))
	for _, p := range paths {
		s, ok := w.sums[p]
		if !ok {
			s = hashFile(p)
		}
		sums[p] = s
	}
	w.sums = sums
	return w.rewatch()
}

// Close stops the Watcher and waits for its goroutines (and for an
// onChange call under way).
func (w *Watcher) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil
	}
	w.closed = true
	w.mu.Unlock()
	close(w.quit)
	err := w.file.Close() // interrupts read
	w.wg.Wait()
	return err
}

// rewatch watches the directories of every file and of its symlinks'
// final target, and no others. The caller holds mu.
func (w *Watcher) rewatch() error {
	interest := make(map[string]map[string]bool)
	add := func(p string) {
		dir, name := filepath.Dir(p), filepath.Base(p)
		if interest[dir] == nil {
			interest[dir] = make(map[string]bool)
		}
		interest[dir][name] = true
	}
	for p := range w.sums {
		add(p)
		if r, err := filepath.EvalSymlinks(p); err == nil && r != p {
			add(r)
		}
	}
	var errs []error
	for dir, wd := range w.dirs {
		if interest[dir] == nil {
			unix.InotifyRmWatch(w.fd, uint32(wd))
			delete(w.dirs, dir)
			delete(w.wds, wd)
		}
	}
	for dir := range interest {
		// Added again even when watched: the directory may have been
		// replaced (a new inode), and adding is idempotent otherwise.
		wd, err := unix.InotifyAddWatch(w.fd, dir, mask|unix.IN_ONLYDIR)
		if err != nil {
			errs = append(errs, &os.PathError{Op: "inotify_add_watch", Path: dir, Err: err})
			if old, ok := w.dirs[dir]; ok {
				delete(w.wds, old)
				delete(w.dirs, dir)
			}
			continue
		}
		if old, ok := w.dirs[dir]; ok && old != wd {
			delete(w.wds, old)
		}
		w.dirs[dir], w.wds[wd] = wd, dir
	}
	w.interest = interest
	return errors.Join(errs...)
}

// read reads events until Close, and pokes settle for those that matter.
func (w *Watcher) read() {
	buf := make([]byte, 64<<10)
	for {
		n, err := w.file.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			continue // EINTR and the like; a closed file ends it
		}
		if w.matters(buf[:n]) {
			select {
			case w.poke <- struct{}{}:
			default:
			}
		}
	}
}

// matters reports whether a batch of events touches a watched file.
func (w *Watcher) matters(b []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(b) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&b[0]))
		end := unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(b) {
			return true // cannot happen; look at everything to be safe
		}
		name := string(bytes.TrimRight(b[unix.SizeofInotifyEvent:end], "\x00"))
		b = b[end:]
		switch {
		case ev.Mask&unix.IN_Q_OVERFLOW != 0:
			return true // events were lost
		case ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0:
			return true // a directory went: look again
		case strings.HasPrefix(name, ".."):
			return true // Kubernetes' ..data, or its timestamped directory
		case w.interest[w.wds[int(ev.Wd)]][name]:
			return true
		}
	}
	return false
}

// settle waits for events to stop, then checks the files.
func (w *Watcher) settle() {
	for {
		select {
		case <-w.poke:
		case <-w.quit:
			return
		}
		first := time.Now()
		t := time.NewTimer(w.debounce)
	wait:
		for {
			select {
			case <-w.poke:
				if time.Since(first) < 5*w.debounce {
					t.Reset(w.debounce)
				}
			case <-t.C:
				break wait
			case <-w.quit:
				t.Stop()
				return
			}
		}
		if changed := w.check(); len(changed) > 0 {
			w.onChange(changed)
		}
	}
}

// check hashes every file, records what changed, and watches where the
// files now are (a symlink may point elsewhere).
func (w *Watcher) check() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	var changed []string
	for p, old := range w.sums {
		if s := hashFile(p); s != old {
			w.sums[p] = s
			changed = append(changed, p)
		}
	}
	w.rewatch() // what cannot be watched now was reported by Set
	slices.Sort(changed)
	return changed
}

func hashFile(p string) sum {
	f, err := os.Open(p)
	if err != nil {
		return sum{missing: true}
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, io.LimitReader(f, maxFile)); err != nil {
		return sum{missing: true}
	}
	var s sum
	h.Sum(s.hash[:0])
	return s
}
