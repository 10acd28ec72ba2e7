package rlconfig

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/floodgate-rl/floodgate/internal/rlmatch"
)

// ErrInvalidConfig is wrapped by every problem that Parse, LoadDir and
// the Watcher find in a configuration, and by every problem that package
// internal/xds finds in the resources of a server.
var ErrInvalidConfig = errInvalidConfig()

// errInvalidConfig returns the error that the module's parser (package
// rlmatch) wraps. A function, as package os does for
// ErrDeadlineExceeded, so that go doc shows no internal name.
func errInvalidConfig() error { return rlmatch.ErrInvalidConfig }

// maxFileSize bounds the size of one configuration file that LoadDir and
// the Watcher read, as LoadDir's doc states.
const maxFileSize = 16 << 20

// Options tunes how a configuration is read. The zero value reads it as
// envoyproxy/ratelimit does by default.
type Options struct {
	// MergeDomains lets several files define descriptors of one domain,
	// as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does. A key/value
	// defined twice at one level is still refused. The zero value
	// refuses a domain that appears in two files.
	MergeDomains bool
}

// Config is a parsed, validated configuration: a set of domains, each a
// tree of descriptors whose meaning the package doc states. It is
// immutable and safe for concurrent use. Hand it to an RLS service
// (package rls) or to [NewRules]; a nil *Config is an empty
// configuration. Its contents belong to the module's matching code (an
// internal package): read them through its methods.
type Config rlmatch.Config

// m is c as the module's matching code reads it.
func (c *Config) m() *rlmatch.Config { return (*rlmatch.Config)(c) }

// Domains returns the configured domains, sorted.
func (c *Config) Domains() []string { return c.m().Domains() }

// Files returns the names of the files the configuration was read from,
// sorted.
func (c *Config) Files() []string { return c.m().Files() }

// Skipped returns what [LoadDir] or a [Watcher] found in the directory
// and did not read, sorted, for a service switching from
// envoyproxy/ratelimit to warn of (the package doc says why): files not
// named *.yaml or *.yml, and subdirectories (with a trailing "/"); dot
// files are not listed.
func (c *Config) Skipped() []string { return c.m().Skipped() }

// Ignored lists the settings of the configuration that have no effect
// where they are written, each as "file: path: what", in file order:
// shadow_mode on a descriptor without a rate_limit, which
// envoyproxy/ratelimit accepts and ignores, so its children's limits
// deny. A service loading the configuration should warn of each.
func (c *Config) Ignored() []string { return c.m().Ignored() }

// String lists the configuration's limits, one a line, file by file in
// name order and in the order written:
// "messaging.to_number: 100/day fixed-window".
func (c *Config) String() string { return c.m().String() }

// Parse reads a configuration from files (file name to contents), each
// holding one domain in the format of the package doc. It validates them
// whole: the error lists every problem of every file, each naming its
// file and descriptor path and wrapping [ErrInvalidConfig] (and
// [floodgate.ErrInvalidRule] where floodgate refuses a limit). An empty
// set of files is a valid, empty configuration.
func Parse(files map[string][]byte, opts Options) (*Config, error) {
	cfg, err := rlmatch.Parse(files, rlmatch.Options{MergeDomains: opts.MergeDomains})
	return (*Config)(cfg), err
}

// LoadDir reads every *.yaml and *.yml file in dir (not its
// subdirectories, and not names starting with a dot, such as the
// ..data entries of a Kubernetes ConfigMap volume; symbolic links are
// followed, and a dangling one is a removed file) and parses them
// together with [Parse]. In a ConfigMap volume (dir holds a ..data link
// to a directory), the files of the version that ..data names are read,
// all of one version, with any file of dir that is not a link into
// ..data. A file that is not a regular file (a FIFO, a
// device) or holds more than 16 MiB (sixteen times what a ConfigMap
// holds) is refused.
func LoadDir(dir string, opts Options) (*Config, error) {
	files, skipped, err := readDir(dir, "")
	if err != nil {
		return nil, err
	}
	return parseDir(files, skipped, opts)
}

// parseDir parses the files of a directory and records what it skipped.
func parseDir(files map[string][]byte, skipped []string, opts Options) (*Config, error) {
	cfg, err := rlmatch.Parse(files, rlmatch.Options{MergeDomains: opts.MergeDomains, Skipped: skipped})
	return (*Config)(cfg), err
}

// readDir reads the configuration files of dir, or only the one named
// only when it is not empty. It also returns, sorted, the names of what
// it did not read (see [Config.Skipped]); none with only.
//
// A Kubernetes ConfigMap volume holds its files in the directory that its
// ..data link names, swapped whole on each update; the names in dir are
// links into ..data, made and removed around the swap. Those files are
// read from one resolution of ..data (a version never changes, it is
// only removed after the next swap; one removed mid-read is read again
// from the next), so that a read never mixes two versions (a domain
// moved from one file to another would be lost or doubled) nor misses a
// file whose link is not made yet. An entry of dir that is not a link
// into ..data is read as in any directory, and wins over the version's
// file of its name.
func readDir(dir, only string) (map[string][]byte, []string, error) {
	link := filepath.Join(dir, "..data")
	if st, err := os.Lstat(link); err != nil || st.Mode()&os.ModeSymlink == 0 {
		return readFiles(dir, only, plain) // not a ConfigMap volume
	}
	for range 100 {
		data, err := filepath.EvalSymlinks(link)
		var st os.FileInfo
		if err == nil {
			st, err = os.Stat(data)
		}
		if errors.Is(err, os.ErrNotExist) {
			time.Sleep(time.Millisecond) // swapped and removed meanwhile
			continue
		}
		if err != nil || !st.IsDir() {
			return readFiles(dir, only, plain) // ..data names no directory
		}
		// A version never changes once ..data names it; it is only
		// removed after the next swap. Read whole, it is one version.
		files, skipped, err := readFiles(data, only, asVersion)
		if errors.Is(err, errVanished) {
			time.Sleep(time.Millisecond) // swapped and removed: read the next one
			continue
		}
		if again, _ := filepath.EvalSymlinks(link); again != data {
			// Swapped during the read: the version may have lost files
			// to its removal before the listing, which no read error
			// shows. Still named after the read, it was whole.
			time.Sleep(time.Millisecond)
			continue
		}
		if err == nil {
			var own map[string][]byte
			var ownSkipped []string
			own, ownSkipped, err = readFiles(dir, only, skipViews)
			maps.Copy(files, own)
			skipped = slices.Compact(slices.Sorted(slices.Values(append(skipped, ownSkipped...))))
		}
		return files, skipped, err
	}
	// Removed under each of 100 reads: no version could be read whole,
	// and the one in force stays.
	return nil, nil, fmt.Errorf("rlconfig: %s: each version vanished while it was read, 100 times", link)
}

// errVanished reports a ConfigMap version removed while it was read.
var errVanished = errors.New("rlconfig: the version vanished while it was read")

// How readFiles reads a directory.
const (
	plain     = iota // any directory: a file gone since the listing is a removed file
	asVersion        // a ConfigMap version: a file gone is the version removed (errVanished)
	skipViews        // a ConfigMap volume: its links into ..data are skipped
)

// readFiles reads the configuration files of dir, as readDir does, in
// one of the modes plain, asVersion and skipViews.
func readFiles(dir, only string, mode int) (map[string][]byte, []string, error) {
	ents, err := os.ReadDir(dir)
	if mode == asVersion && errors.Is(err, os.ErrNotExist) {
		return nil, nil, errVanished
	}
	if err != nil {
		return nil, nil, fmt.Errorf("rlconfig: read directory: %w", err)
	}
	files := map[string][]byte{}
	var skipped []string
	for _, e := range ents {
		name := e.Name()
		yaml := strings.HasSuffix(name, ".yaml") || strings.HasSuffix(name, ".yml")
		if strings.HasPrefix(name, ".") || only != "" && name != only {
			continue
		}
		p := filepath.Join(dir, name)
		if mode == skipViews {
			if t, err := os.Readlink(p); err == nil && strings.HasPrefix(filepath.Clean(t), "..data"+string(filepath.Separator)) {
				continue // the version's file, read from ..data
			}
		}
		st, err := os.Stat(p) // follows a symbolic link
		if errors.Is(err, os.ErrNotExist) {
			if mode == asVersion {
				return nil, nil, errVanished
			}
			// Removed since the listing, or a link left dangling for a
			// moment by a ConfigMap update: the file is gone.
			continue
		}
		if err != nil {
			if !yaml {
				skipped = append(skipped, name)
				continue
			}
			return nil, nil, fmt.Errorf("rlconfig: %w", err)
		}
		if st.IsDir() {
			skipped = append(skipped, name+"/")
			continue
		}
		if !yaml {
			skipped = append(skipped, name)
			continue
		}
		if !st.Mode().IsRegular() {
			// A FIFO would block the read for ever, a device never end.
			return nil, nil, fmt.Errorf("%w: %s: not a regular file (%v)", ErrInvalidConfig, p, st.Mode().Type())
		}
		if st.Size() > maxFileSize {
			return nil, nil, fmt.Errorf("%w: %s: %d bytes, more than the %d a configuration file may hold", ErrInvalidConfig, p, st.Size(), maxFileSize)
		}
		data, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			if mode == asVersion {
				return nil, nil, errVanished
			}
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("rlconfig: %w", err)
		}
		files[name] = data
	}
	sort.Strings(skipped)
	return files, skipped, nil
}
