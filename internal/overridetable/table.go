// Package overridetable holds the overrides of package overrides in
// Redis: an entry's stored form and its validation, and the hash and
// version counter of a key prefix. Package overrides documents all of it
// (the layout, the bounds, when a change is in force) and follows a table
// for a service; cmd/floodgate's override commands edit and list one
// through this package.
package overridetable

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/redisopt"
	"github.com/redis/rueidis"
)

// The figures that package overrides documents.
const (
	// MaxEntries is the most overrides a table holds.
	MaxEntries = 10_000
	// maxBytes is the most a table's hash may take in Redis (MEMORY
	// USAGE) for a Table to read it.
	maxBytes = 64 << 20
	// DefaultRefresh is how often a service reads the table by default.
	DefaultRefresh = 5 * time.Second
	// defaultPrefix is the key prefix when none is given: redisstore's.
	defaultPrefix = "fg:"
	// defaultDialTimeout bounds a connection attempt when neither
	// Options.DialTimeout nor the URL's dial_timeout does.
	defaultDialTimeout = time.Second
)

var (
	// ErrInvalidOptions is overrides.ErrInvalidOptions.
	ErrInvalidOptions = errors.New("overrides: invalid options")
	// ErrTableFull is overrides.ErrTableFull.
	ErrTableFull = errors.New("overrides: table full")
)

// Options locates a [Table]: exactly one of URL and Client, as in
// overrides.Options, and the key prefix.
type Options struct {
	URL    string
	Client rueidis.Client
	Prefix string
	// DialTimeout bounds one connection attempt of a Table built from
	// URL. Zero means the URL's dial_timeout, or a second.
	DialTimeout time.Duration
}

// Validate reports every problem with o, each wrapping
// [ErrInvalidOptions].
func (o Options) Validate() error {
	var errs []error
	switch {
	case o.URL == "" && o.Client == nil:
		errs = append(errs, fmt.Errorf("%w: set URL or Client", ErrInvalidOptions))
	case o.URL != "" && o.Client != nil:
		errs = append(errs, fmt.Errorf("%w: set only one of URL and Client", ErrInvalidOptions))
	case o.URL != "":
		if _, err := redisopt.FromURL(o.URL, 0, 0); err != nil {
			errs = append(errs, fmt.Errorf("%w: URL: %w", ErrInvalidOptions, err))
		}
	}
	if len(o.Prefix) > 64 {
		errs = append(errs, fmt.Errorf("%w: prefix is %d bytes long, at most 64 allowed", ErrInvalidOptions, len(o.Prefix)))
	}
	if strings.ContainsAny(o.Prefix, "{}") {
		errs = append(errs, fmt.Errorf("%w: prefix %q has a brace, which would change the keys' Cluster hash tag", ErrInvalidOptions, o.Prefix))
	}
	if o.DialTimeout < 0 {
		errs = append(errs, fmt.Errorf("%w: dial timeout %v is negative", ErrInvalidOptions, o.DialTimeout))
	}
	return errors.Join(errs...)
}

// Table is the overrides of one key prefix, in Redis: one hash, and a
// version counter that every change through a Table bumps (package
// overrides documents the layout). It is what an operator edits
// (floodgate override set|get|rm|ls) and what overrides.Table follows. A
// Table is safe for concurrent use; Close it when done.
type Table struct {
	hash, version string
	opt           rueidis.ClientOption // for a Table built from a URL
	owned         bool                 // the Table built its client and closes it

	mu     sync.Mutex
	client rueidis.Client // guarded by mu until set; nil until connected
	closed bool           // guarded by mu
}

var (
	//go:embed set.lua
	setLua    string
	setScript = rueidis.NewLuaScript(setLua)
	//go:embed delete.lua
	deleteLua    string
	deleteScript = rueidis.NewLuaScript(deleteLua)
	//go:embed load.lua
	loadLua    string
	loadScript = rueidis.NewLuaScript(loadLua)
)

// New returns the table that opts locates. Only bad options fail: a
// Table built from a URL connects on first use.
func New(opts Options) (*Table, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	prefix := cmp.Or(opts.Prefix, defaultPrefix)
	t := &Table{hash: prefix + "{overrides}", version: prefix + "{overrides}:version", client: opts.Client}
	if opts.URL != "" {
		opt, err := redisopt.FromURL(opts.URL, opts.DialTimeout, defaultDialTimeout)
		if err != nil { // Validate parsed it already
			return nil, fmt.Errorf("%w: URL: %w", ErrInvalidOptions, err)
		}
		t.opt, t.owned = opt, true
	}
	return t, nil
}

// Key is the name of the Redis hash that holds the overrides.
func (t *Table) Key() string { return t.hash }

// Close closes the client the Table built from a URL; a Client passed in
// Options stays open. Later calls fail.
func (t *Table) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed && t.owned && t.client != nil {
		t.client.Close()
	}
	t.closed = true
	return nil
}

// conn returns the client, connecting first if the Table was built from a
// URL and has not connected yet. rueidis.NewClient takes no context: a
// connection attempt lasts at most the dial timeout.
func (t *Table) conn() (rueidis.Client, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errors.New("overrides: table is closed")
	}
	if t.client == nil {
		c, err := rueidis.NewClient(t.opt)
		if err != nil {
			return nil, fmt.Errorf("overrides: connect: %w: %w", floodgate.ErrStoreUnavailable, err)
		}
		t.client = c
	}
	return t.client, nil
}

// Set is overrides.Table.Set: it stores e, which must be valid, pruning
// the expired overrides first when the table is full.
func (t *Table) Set(ctx context.Context, e Entry) error {
	if err := e.Validate(); err != nil {
		return err
	}
	held, err := t.set(ctx, e)
	if err == nil && held > 0 {
		var pruned int
		if pruned, err = t.Prune(ctx, time.Now()); err == nil && pruned > 0 {
			held, err = t.set(ctx, e)
		}
	}
	if err != nil {
		return err
	}
	if held > 0 {
		return fmt.Errorf("%w: %s holds %d overrides, the most a table holds (%d): remove some (floodgate override rm) before adding key %q under rule %s",
			ErrTableFull, t.hash, held, MaxEntries, Truncate(e.Key), e.Rule.Name)
	}
	return nil
}

// set runs set.lua: 0 when e is stored, or the number of fields the
// table holds when it refused e as a new field beyond MaxEntries.
func (t *Table) set(ctx context.Context, e Entry) (int64, error) {
	c, err := t.conn()
	if err != nil {
		return 0, err
	}
	reply, err := setScript.Exec(ctx, c, []string{t.hash, t.version}, []string{e.field(), e.value(), strconv.Itoa(MaxEntries)}).AsIntSlice()
	if err != nil {
		return 0, fmt.Errorf("overrides: set: %w: %w", floodgate.ErrStoreUnavailable, err)
	}
	if len(reply) != 2 || reply[0] != 0 && reply[0] != 1 {
		return 0, fmt.Errorf("overrides: set: %w: unexpected reply %v", floodgate.ErrStoreUnavailable, reply)
	}
	if reply[0] == 1 {
		return 0, nil
	}
	return max(reply[1], 1), nil
}

// Get returns the override of key under the rule named rule, and whether
// there is one. An expired override is returned as well (see
// [Entry.ExpiredAt]); a stored value that cannot be read is an error
// wrapping [ErrInvalidEntry]. Get reads one field: in a table written
// past MaxEntries by hand it may return an override that services refuse
// ([Table.List] tells which).
func (t *Table) Get(ctx context.Context, rule, key string) (Entry, bool, error) {
	c, err := t.conn()
	if err != nil {
		return Entry{}, false, err
	}
	field := rule + fieldSep + key
	v, err := c.Do(ctx, c.B().Hget().Key(t.hash).Field(field).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return Entry{}, false, nil
	}
	if err != nil {
		return Entry{}, false, fmt.Errorf("overrides: get: %w: %w", floodgate.ErrStoreUnavailable, err)
	}
	e, err := parseEntry(field, v)
	if err != nil {
		return Entry{}, false, err
	}
	return e, true, nil
}

// Delete removes the override of key under the rule named rule, and
// reports whether there was one.
func (t *Table) Delete(ctx context.Context, rule, key string) (bool, error) {
	return t.delete(ctx, rule+fieldSep+key)
}

// delete removes field; given a value, only while the field holds it.
func (t *Table) delete(ctx context.Context, field string, value ...string) (bool, error) {
	c, err := t.conn()
	if err != nil {
		return false, err
	}
	n, err := deleteScript.Exec(ctx, c, []string{t.hash, t.version}, append([]string{field}, value...)).AsInt64()
	if err != nil {
		return false, fmt.Errorf("overrides: delete: %w: %w", floodgate.ErrStoreUnavailable, err)
	}
	return n > 0, nil
}

// Listing is the content of a [Table] at one moment.
type Listing struct {
	// Version is the table's version counter when it was read (empty if
	// the counter does not exist): the entries are at least that recent.
	Version string
	// Entries are the valid overrides, expired ones included, by rule
	// name and key.
	Entries []Entry
	// Invalid are the fields whose values cannot be read or that lie
	// beyond MaxEntries, by field.
	Invalid []Invalid
}

// Invalid is a stored override that cannot be used.
type Invalid struct {
	Field, Value string
	// Err says why; it wraps ErrInvalidEntry.
	Err error
}

// List reads every override, in one round trip. Of a table that holds
// more than MaxEntries fields (written by hand), it reads the first
// MaxEntries by byte order, as a service does, and lists the others as
// Invalid, each with the same error wrapping [ErrTableFull] and
// [ErrInvalidEntry], unparsed. A table whose hash takes more than
// maxBytes in Redis is not read at all: List fails with an error
// wrapping [ErrTableFull] that gives its size.
func (t *Table) List(ctx context.Context) (*Listing, error) {
	v, m, err := t.load(ctx)
	if err != nil {
		return nil, err
	}
	fields := make([]string, 0, len(m))
	for f := range m {
		fields = append(fields, f)
	}
	sort.Strings(fields)
	var excess []string
	if len(fields) > MaxEntries {
		fields, excess = fields[:MaxEntries], fields[MaxEntries:]
	}
	l := &Listing{Version: v, Entries: make([]Entry, 0, len(fields))}
	for _, f := range fields {
		e, err := parseEntry(f, m[f])
		if err != nil {
			l.Invalid = append(l.Invalid, Invalid{Field: f, Value: m[f], Err: err})
			continue
		}
		l.Entries = append(l.Entries, e)
	}
	if len(excess) > 0 {
		// One error for all of them: a table written far past the bound
		// costs no error per entry refused.
		err := fmt.Errorf("%w: %w: %s holds %d overrides, %d more than a table holds: the fields after the first %d by byte order are refused",
			ErrInvalidEntry, ErrTableFull, t.hash, len(m), len(excess), MaxEntries)
		for _, f := range excess {
			l.Invalid = append(l.Invalid, Invalid{Field: f, Value: m[f], Err: err})
		}
	}
	sortEntries(l.Entries)
	return l, nil
}

// load reads the version counter ("" if missing) and the hash, as stored,
// in one script: a hash that takes more than maxBytes in Redis is not
// read, and load returns an error wrapping [ErrTableFull].
func (t *Table) load(ctx context.Context) (string, map[string]string, error) {
	c, err := t.conn()
	if err != nil {
		return "", nil, err
	}
	reply, err := loadScript.Exec(ctx, c, []string{t.hash, t.version}, []string{strconv.Itoa(maxBytes)}).ToArray()
	if err != nil {
		return "", nil, fmt.Errorf("overrides: list: %w: %w", floodgate.ErrStoreUnavailable, err)
	}
	if len(reply) != 2 && len(reply) != 3 {
		return "", nil, fmt.Errorf("overrides: list: %w: unexpected reply of %d elements", floodgate.ErrStoreUnavailable, len(reply))
	}
	v, err := reply[0].ToString()
	if err != nil {
		return "", nil, fmt.Errorf("overrides: list: %w: version: %w", floodgate.ErrStoreUnavailable, err)
	}
	size, err := reply[1].AsInt64()
	if err != nil {
		return "", nil, fmt.Errorf("overrides: list: %w: size: %w", floodgate.ErrStoreUnavailable, err)
	}
	if len(reply) == 2 {
		return "", nil, fmt.Errorf("%w: %s takes %d bytes in Redis (MEMORY USAGE), more than the %d a table may take, and is not read: "+
			"find its large fields (redis-cli --bigkeys, HSCAN, HSTRLEN) and delete them (floodgate override rm, or HDEL)",
			ErrTableFull, t.hash, size, maxBytes)
	}
	m, err := reply[2].AsStrMap()
	if err != nil {
		return "", nil, fmt.Errorf("overrides: list: %w: %w", floodgate.ErrStoreUnavailable, err)
	}
	return v, m, nil
}

// Version reads the version counter alone: what a service checks
// between loads. A missing counter is "".
func (t *Table) Version(ctx context.Context) (string, error) {
	c, err := t.conn()
	if err != nil {
		return "", err
	}
	v, err := c.Do(ctx, c.B().Get().Key(t.version).Build()).ToString()
	if rueidis.IsRedisNil(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("overrides: version: %w: %w", floodgate.ErrStoreUnavailable, err)
	}
	return v, nil
}

// Prune deletes the overrides that expired by now, each only if its
// stored value did not change meanwhile, and returns how many it deleted.
// Services ignore expired overrides by themselves; Prune only keeps the
// hash small. Invalid entries are left for an operator to read.
func (t *Table) Prune(ctx context.Context, now time.Time) (int, error) {
	_, m, err := t.load(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for f, val := range m {
		e, err := parseEntry(f, val)
		if err != nil || !e.ExpiredAt(now) {
			continue
		}
		ok, err := t.delete(ctx, f, val)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}
