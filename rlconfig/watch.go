package rlconfig

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// WatchOptions tunes a [Watcher]. The zero value is ready to use.
type WatchOptions struct {
	// Options are the parse options of every load.
	Options Options
	// Debounce is how long the directory must stay quiet before it is
	// read again, so that a burst of events (an editor's save, a
	// ConfigMap's symlink swap) is one reload; a directory that never
	// goes quiet is read ten Debounces after its first change. Zero
	// means 100ms.
	Debounce time.Duration
	// OnReload, when set, is called after each reload that an event
	// started and that found other than the previous read found (other
	// files read or, in a directory, other entries skipped: see
	// [Config.Skipped]), from the Watcher's goroutine: with the new
	// configuration and a nil error when it is in force, or with a nil
	// configuration and the error when it was refused (every problem
	// listed, wrapping [ErrInvalidConfig]) or the directory could not be
	// read or watched. The old configuration then stays in force. It is
	// where a service logs and counts config_load_success and
	// config_load_error. Events that leave both as they were (a file
	// rewritten unchanged, a file whose name starts with a dot, such as
	// an editor's swap file, and beside the one file that Watch was
	// given, any other, such as a temporary file renamed over it) call
	// nothing, so that each call is a change. In a directory, a
	// temporary file not named with a dot is a skipped entry: renamed
	// over a file more than a debounce after it was written, it makes
	// two calls.
	OnReload func(cfg *Config, err error)
	// AllowEmpty lets a reload put in force a configuration of no file,
	// the directory emptied: no domain, every request answered OK. By
	// default such a reload is refused, as an invalid file is (the error
	// wraps [ErrEmptyConfig]), and the configuration in force stays:
	// the last file removed is more often a mistake (a ConfigMap
	// emptied, a volume mounted late, a deploy that deleted before it
	// wrote) than a wish to drop every limit. The first read, at Watch,
	// accepts an empty directory either way: no limit was in force.
	AllowEmpty bool
}

// ErrEmptyConfig is wrapped by the error of a reload that a [Watcher]
// refused because it found no configuration file (see
// WatchOptions.AllowEmpty). It wraps [ErrInvalidConfig].
var ErrEmptyConfig = fmt.Errorf("%w: no configuration file (every limit would be dropped)", ErrInvalidConfig)

// Watcher holds the configuration read from a directory (or one file of
// it, see [Watch]) and reloads it when the directory changes. It sees files written in place, added or
// removed, and the atomic swap of the ..data symbolic link that
// Kubernetes performs on a mounted ConfigMap, as well as a swap of the
// directory itself, or of any directory above it, when it is a symbolic
// link (envoyproxy/ratelimit's RUNTIME_ROOT). A new configuration is
// validated whole and replaces the old one atomically; an invalid one is
// refused and the old one stays in force. Its methods are safe for
// concurrent use. Close it when done.
type Watcher struct {
	dir      string
	only     string // the one file read, or "" for every file of dir
	opts     WatchOptions
	cfg      atomic.Pointer[Config]
	fsw      *fsnotify.Watcher
	reload   sync.Mutex // serializes reading the directory and swapping cfg
	done     chan struct{}
	wg       sync.WaitGroup
	closeErr error
	once     sync.Once

	// last is what the previous read found, nil when it failed; the
	// reload mutex guards it.
	last *snapshot

	// links maps each directory watched besides dir to the names in it
	// whose change swaps what dir names: dir's own name in its parent,
	// and every symbolic link on dir's path in its own parent (an
	// envoyproxy/ratelimit RUNTIME_ROOT swapped above RUNTIME_ROOT/
	// RUNTIME_SUBDIRECTORY/config). Only the Watcher's goroutine uses it
	// once watching has started.
	links map[string]map[string]bool
}

// Watch loads the configuration at path and starts watching it. path
// names a directory, read as [LoadDir] reads it, or one file named
// *.yaml or *.yml (not starting with a dot), read alone: its directory is
// watched, which sees the file replaced by a rename, as editors and
// configuration tools write it, and a reload that finds the file gone is
// refused, as an invalid file is. Watch returns an error, and starts
// nothing, when the first configuration is invalid or path cannot be
// watched.
func Watch(path string, opts WatchOptions) (*Watcher, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("rlconfig: watch %s: %w", path, err)
	}
	if st.IsDir() {
		return watch(path, "", opts)
	}
	name := filepath.Base(path)
	if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")) {
		return nil, fmt.Errorf("%w: %s: the file's name must end in .yaml or .yml and not start with a dot", ErrInvalidConfig, path)
	}
	return watch(filepath.Dir(path), name, opts)
}

func watch(dir, only string, opts WatchOptions) (*Watcher, error) {
	if opts.Debounce <= 0 {
		opts.Debounce = 100 * time.Millisecond
	}
	// An absolute path has a parent of its own: "." would be its own
	// parent, and its files' events taken for a sibling's.
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("rlconfig: watch %s: %w", dir, err)
	}
	fsw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("rlconfig: watch %s: %w", dir, err)
	}
	// The directory itself first, and then (watchLinks) the parents of
	// its name and of each symbolic link on its path, to see any of them
	// swapped. Watch before the first read, so that no change slips
	// between the two.
	if err := fsw.Add(dir); err != nil {
		fsw.Close()
		return nil, fmt.Errorf("rlconfig: watch %s: %w", dir, err)
	}
	w := &Watcher{dir: dir, only: only, opts: opts, fsw: fsw, done: make(chan struct{})}
	// The parents are watched at best: where one cannot be, a swap of
	// its link goes unseen, and every other change is seen.
	w.watchLinks()
	cfg, err := w.read()
	if err != nil {
		fsw.Close()
		return nil, err
	}
	w.cfg.Store(cfg)
	w.wg.Add(1)
	go w.loop()
	return w, nil
}

// Config returns the configuration in force. It never returns nil.
func (w *Watcher) Config() *Config { return w.cfg.Load() }

// Reload reads the directory now. It swaps in the new configuration and
// returns nil, or returns the error and keeps the old one (a directory
// with no file is refused unless WatchOptions.AllowEmpty). It does not
// call OnReload, and what it read is no change to the next read that an
// event starts.
func (w *Watcher) Reload() error {
	_, _, err := w.load()
	return err
}

// load reads the directory and swaps in what it holds when it is valid;
// changed reports whether the files read differ from the previous
// read's. One load at a time, so an older read never replaces a newer
// one.
func (w *Watcher) load() (cfg *Config, changed bool, err error) {
	w.reload.Lock()
	defer w.reload.Unlock()
	prev := w.last
	cfg, err = w.read()
	changed = prev == nil || !prev.equal(w.last)
	if err == nil && len(cfg.Files()) == 0 && !w.opts.AllowEmpty {
		err = fmt.Errorf("rlconfig: %s: %w", w.dir, ErrEmptyConfig)
	}
	if err != nil {
		return nil, changed, err
	}
	w.cfg.Store(cfg)
	return cfg, changed, nil
}

// read reads and parses the watched files, and records what it read in
// last.
func (w *Watcher) read() (*Config, error) {
	files, skipped, err := readDir(w.dir, w.only)
	if err != nil {
		w.last = nil
		return nil, err
	}
	w.last = &snapshot{files, skipped}
	if _, ok := files[w.only]; w.only != "" && !ok {
		// Watch's one file is required: its absence is not an empty
		// configuration that would drop every limit.
		return nil, fmt.Errorf("rlconfig: %s: %w", filepath.Join(w.dir, w.only), os.ErrNotExist)
	}
	return parseDir(files, skipped, w.opts.Options)
}

// snapshot is what one read of the directory found: the files read, by
// name, and the entries skipped.
type snapshot struct {
	files   map[string][]byte
	skipped []string
}

// equal reports whether s and o found the same; a nil o (a failed read)
// equals nothing.
func (s *snapshot) equal(o *snapshot) bool {
	return o != nil && maps.EqualFunc(s.files, o.files, bytes.Equal) && slices.Equal(s.skipped, o.skipped)
}

// Close stops watching and waits for the Watcher's goroutine to end, so
// no OnReload call runs after it returns. The configuration stays
// readable. Close is idempotent.
func (w *Watcher) Close() error {
	w.once.Do(func() {
		close(w.done)
		w.closeErr = w.fsw.Close()
		w.wg.Wait()
	})
	return w.closeErr
}

func (w *Watcher) loop() {
	defer w.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var pending bool    // an event waits for the timer
	var since time.Time // when the first waiting event came
	maxDelay := 10 * w.opts.Debounce
	for {
		select {
		case <-w.done:
			return
		case ev, ok := <-w.fsw.Events:
			if !ok {
				return
			}
			if names, ok := w.links[filepath.Dir(ev.Name)]; ok {
				if !names[filepath.Base(ev.Name)] {
					continue // a sibling of the directory or of a link: not ours
				}
				// The directory, or a symbolic link on its path, was
				// replaced: watch what the path names now. A failure
				// shows in the reload that follows.
				w.watchLinks()
			}
			// Wait for quiet, but never more than maxDelay after the
			// first event: a directory written without pause is still
			// read.
			now := time.Now()
			if !pending {
				pending, since = true, now
			}
			if now.Sub(since) < maxDelay {
				timer.Reset(w.opts.Debounce)
			}
		case err, ok := <-w.fsw.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Events were lost: read the directory to catch up.
				if !pending {
					pending, since = true, time.Now()
				}
				timer.Reset(w.opts.Debounce)
				continue
			}
			w.report(nil, fmt.Errorf("rlconfig: watch %s: %w", w.dir, err))
		case <-timer.C:
			pending = false
			if cfg, changed, err := w.load(); changed {
				w.report(cfg, err)
			}
		}
	}
}

// watchLinks (re)starts watching dir and the parents of its name and of
// every symbolic link on its path, as the path resolves now, and records
// them in links.
func (w *Watcher) watchLinks() {
	_ = w.fsw.Remove(w.dir)
	_ = w.fsw.Add(w.dir)
	for parent := range w.links {
		_ = w.fsw.Remove(parent)
	}
	w.links = map[string]map[string]bool{}
	add := func(p string) {
		parent, name := filepath.Dir(p), filepath.Base(p)
		if parent == p {
			return // the root has no parent
		}
		if w.links[parent] == nil {
			w.links[parent] = map[string]bool{}
			_ = w.fsw.Add(parent)
		}
		w.links[parent][name] = true
	}
	add(w.dir)
	// Every symbolic link met resolving the path, the targets' own
	// included (a directory linked to RUNTIME_ROOT/config, RUNTIME_ROOT
	// itself a link that is swapped), up to 40 as the kernel allows.
	path := w.dir
	for range 40 {
		link, rest := firstLink(path)
		if link == "" {
			return
		}
		add(link)
		target, err := os.Readlink(link)
		if err != nil {
			return
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(link), target)
		}
		path = filepath.Join(target, rest)
	}
}

// firstLink returns the first prefix of the absolute path p, from the
// root down, that is a symbolic link, and the rest of p after it; "" when
// none is.
func firstLink(p string) (link, rest string) {
	parts := strings.Split(strings.TrimPrefix(filepath.Clean(p), string(filepath.Separator)), string(filepath.Separator))
	q := string(filepath.Separator)
	for i, part := range parts {
		q = filepath.Join(q, part)
		if st, err := os.Lstat(q); err == nil && st.Mode()&os.ModeSymlink != 0 {
			return q, filepath.Join(parts[i+1:]...)
		}
	}
	return "", ""
}

func (w *Watcher) report(cfg *Config, err error) {
	if w.opts.OnReload != nil {
		w.opts.OnReload(cfg, err)
	}
}
