package bank

import (
	"sync"
	"time"
)

// Transfer is one PIX transfer out of an account.
type Transfer struct {
	ID          string    `json:"id"`
	Key         string    `json:"key"`
	AmountCents int64     `json:"amount_cents"`
	CreatedAt   time.Time `json:"created_at"`
}

// Ledger holds the transfers of every account in memory. It stands in for
// the bank's real database: replicas in one process share one Ledger;
// separate processes each keep their own. It is safe for concurrent use.
type Ledger struct {
	mu        sync.Mutex
	transfers map[string][]Transfer // by account, guarded by mu
}

// maxStatement is how many of an account's latest transfers a statement
// lists.
const maxStatement = 100

// NewLedger returns an empty ledger.
func NewLedger() *Ledger { return &Ledger{transfers: make(map[string][]Transfer)} }

// Add records a transfer out of account and returns it.
func (l *Ledger) Add(account, key string, cents int64, now time.Time) Transfer {
	t := Transfer{ID: randomID(), Key: key, AmountCents: cents, CreatedAt: now.UTC()}
	l.mu.Lock()
	defer l.mu.Unlock()
	ts := append(l.transfers[account], t)
	if len(ts) > maxStatement {
		ts = ts[len(ts)-maxStatement:]
	}
	l.transfers[account] = ts
	return t
}

// Statement returns the account's latest transfers, oldest first.
func (l *Ledger) Statement(account string) []Transfer {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Transfer(nil), l.transfers[account]...)
}
