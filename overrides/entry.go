package overrides

import (
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/overridetable"
)

var (
	// ErrInvalidEntry reports an override that cannot be used: a bad
	// rule, an empty or oversized key, a malformed stored value. The
	// errors of [Table.Set] and [NewSet] wrap it; those
	// of a bad rule wrap floodgate.ErrInvalidRule too.
	ErrInvalidEntry = overridetable.ErrInvalidEntry
	// ErrInvalidOptions reports [Options] that cannot be used.
	ErrInvalidOptions = overridetable.ErrInvalidOptions
	// ErrTableFull reports an override that [Table.Set] refused because
	// the table holds the most overrides it may, or a table too large
	// in Redis to be read (see the package documentation).
	ErrTableFull = overridetable.ErrTableFull
)

// Entry is one override: under the rule named Rule.Name, Key gets Rule's
// limit, window, algorithm and burst instead of the base rule's, until
// Expires.
type Entry struct {
	// Rule is the rule in force for Key. Its Name is the base rule's
	// name, which the override keeps (see floodgate.Overrides).
	Rule floodgate.Rule
	// Key is the key as the application spells it (the Key of its
	// floodgate.Hit, before any encoding): 1 byte to 1 MiB,
	// any bytes.
	Key string
	// Expires is when the override ends, to the nanosecond; the zero Time
	// means never.
	Expires time.Time
}
