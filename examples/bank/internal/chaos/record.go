package chaos

import (
	"net/http"
	"slices"
	"sync"
	"time"
)

// The routes the load sends, as records name them.
const (
	Login     = "login"
	PIX       = "pix"
	Statement = "statement"
)

// Outcome is what an answer shows about who decided it.
type Outcome uint8

const (
	// Admitted: the store let the request through. On PIX and the
	// statement the answer carries the RateLimit fields; on login (an
	// opaque, fail-closed route) every 200 or 401 went through the store.
	Admitted Outcome = iota
	// Denied: the store refused it (429 with the RateLimit fields).
	Denied
	// FailedClosed: PIX refused without a decision (429, no RateLimit
	// fields): the store failed and the route fails closed.
	FailedClosed
	// FailedOpen: the statement served without a decision (200, no
	// RateLimit fields): the store failed and the route fails open.
	FailedOpen
	// Refused: a login 429. Login is opaque, so a denial and a fail-closed
	// answer are byte-identical by design; the replicas' metrics tell
	// them apart.
	Refused
	// Unavailable: no replica answered (a 502 from the proxy, or a
	// transport error).
	Unavailable
	// Invalid: an answer the route's contract does not allow, such as a PIX
	// admitted without a decision (failing open) or a statement refused
	// without one.
	Invalid

	numOutcomes = iota
)

var outcomeNames = [numOutcomes]string{"admitted", "denied", "failed closed", "failed open", "refused", "unavailable", "invalid"}

// String returns the outcome's name, as the results print it.
func (o Outcome) String() string {
	if int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return "unknown"
}

// Classify returns the outcome of an answer with status (0 for a
// transport error) and header on route.
func Classify(route string, status int, header http.Header) Outcome {
	quota := header.Get("RateLimit") != ""
	switch {
	case status == 0 || status == http.StatusBadGateway:
		return Unavailable
	case route == Login && (status == http.StatusOK || status == http.StatusUnauthorized):
		return Admitted
	case route == Login && status == http.StatusTooManyRequests:
		return Refused
	case route == PIX && status == http.StatusCreated && quota,
		route == Statement && status == http.StatusOK && quota:
		return Admitted
	case (route == PIX || route == Statement) && status == http.StatusTooManyRequests && quota:
		return Denied
	case route == PIX && status == http.StatusTooManyRequests:
		return FailedClosed
	case route == Statement && status == http.StatusOK:
		return FailedOpen
	}
	return Invalid
}

// Record is one request of the load and its answer.
type Record struct {
	Route string
	// Client is the client address the request came from (what the proxy
	// forwarded, or the peer for requests sent straight to a replica).
	Client string
	// Account names the account of the request: the one logging in, or the
	// token's.
	Account string
	// Device is set on a login that presented a valid device cookie for
	// the account: the account limit counts it on the device's key.
	Device bool
	// Probe is set on the recovery probes, sent straight to one replica.
	Probe bool
	// Replica is the replica that answered, from 1; 0 if none did.
	Replica int
	Status  int
	Outcome Outcome
	// Start and End bracket the request: the decision was taken in
	// between.
	Start, End time.Time
}

// Recorder collects records from many goroutines, and keeps, per
// replica, the end of the last probe the store decided, so that the fault
// injector can wait for recovery.
type Recorder struct {
	mu         sync.Mutex
	recs       []Record          // guarded by mu
	lastDecide map[int]time.Time // guarded by mu; by replica, the start of the latest probe the store decided
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder {
	return &Recorder{recs: make([]Record, 0, 1<<16), lastDecide: map[int]time.Time{}}
}

// Add records r.
func (rc *Recorder) Add(r Record) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.recs = append(rc.recs, r)
	if r.Probe && (r.Outcome == Admitted || r.Outcome == Denied) && r.Start.After(rc.lastDecide[r.Replica]) {
		rc.lastDecide[r.Replica] = r.Start
	}
}

// DecidedSince reports whether the store decided a probe sent to replica
// at or after t.
func (rc *Recorder) DecidedSince(replica int, t time.Time) bool {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return !rc.lastDecide[replica].Before(t)
}

// Records returns a copy of the records, ordered by start.
func (rc *Recorder) Records() []Record {
	rc.mu.Lock()
	out := slices.Clone(rc.recs)
	rc.mu.Unlock()
	slices.SortStableFunc(out, func(a, b Record) int { return a.Start.Compare(b.Start) })
	return out
}
