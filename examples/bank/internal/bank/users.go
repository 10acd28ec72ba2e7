package bank

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"

	"golang.org/x/crypto/bcrypt"
)

// UserRecord is one entry of a users file: a JSON array of
// {"document": "<CPF or CNPJ, punctuation allowed>", "name": "...",
// "password_bcrypt": "<bcrypt hash, any cost>"}.
type UserRecord struct {
	Document       string `json:"document"`
	Name           string `json:"name"`
	PasswordBcrypt string `json:"password_bcrypt"`
}

// User is an account holder.
type User struct {
	Document Document
	Name     string
	hash     []byte
	cost     int    // of hash
	cred     []byte // see Directory.Credential; kept across rehashes
}

// Directory finds users by document and checks passwords. Its zero value is
// empty and refuses everyone. It is safe for concurrent use.
//
// Every call of [Directory.Authenticate] does the same hashing work, so
// that its timing tells neither whether a document is an account nor
// whether the account's hash is an old, cheaper one. bcrypt's work at cost
// c is 2^c rounds of its key schedule, plus a fixed setup that is a
// single round's worth. With maxCost the directory's highest cost:
//   - an unknown document is compared with a dummy hash of cost maxCost:
//     2^maxCost;
//   - an account of cost maxCost is compared with its own hash: 2^maxCost;
//   - an account of a lower cost c is compared with its own hash and then
//     with dummies of costs c, c+1, ..., maxCost-1:
//     2^c + (2^c + 2^(c+1) + ... + 2^(maxCost-1)) = 2^maxCost.
//
// The lower-cost case makes maxCost-c+1 comparisons instead of one, so it
// does maxCost-c more setups: at cost 10 against 11, one round in 4,097
// (0.02%), far below the noise of a network. A successful login rehashes a
// lower-cost account at maxCost, so it pays the padding only until its
// owner's next login.
type Directory struct {
	mu    sync.RWMutex
	users map[Document]User // guarded by mu; rehashes replace entries
	// dummies holds a hash of a password nobody has, one per cost from the
	// lowest account cost to maxCost. Read-only after construction.
	dummies map[int][]byte
	maxCost int
	// compare and generate are bcrypt's (nil means bcrypt's too); tests
	// count their calls and costs.
	compare  func(hash, password []byte) error
	generate func(password []byte, cost int) ([]byte, error)
}

// maxUsersFile bounds what ReadUsers reads.
const maxUsersFile = 64 << 20

// ReadUsers parses a users file and builds a directory, listing every bad
// entry at once.
func ReadUsers(r io.Reader) (*Directory, error) {
	var recs []UserRecord
	dec := json.NewDecoder(io.LimitReader(r, maxUsersFile))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&recs); err != nil {
		return nil, fmt.Errorf("users file: %w", err)
	}
	return NewDirectory(recs)
}

// NewDirectory builds a directory from records, listing every bad one.
func NewDirectory(recs []UserRecord) (*Directory, error) {
	d := &Directory{users: make(map[Document]User, len(recs)), dummies: make(map[int][]byte)}
	var errs []error
	minCost, maxCost := bcrypt.MaxCost, bcrypt.MinCost
	for i, rec := range recs {
		doc, err := ParseDocument(rec.Document)
		if err != nil {
			errs = append(errs, fmt.Errorf("user %d: %w", i, err))
			continue
		}
		cost, err := bcrypt.Cost([]byte(rec.PasswordBcrypt))
		if err != nil {
			errs = append(errs, fmt.Errorf("user %d: password_bcrypt: %w", i, err))
			continue
		}
		if _, dup := d.users[doc]; dup {
			errs = append(errs, fmt.Errorf("user %d: duplicate document", i))
			continue
		}
		minCost, maxCost = min(minCost, cost), max(maxCost, cost)
		cred := sha256.Sum256([]byte(rec.PasswordBcrypt))
		d.users[doc] = User{Document: doc, Name: rec.Name, hash: []byte(rec.PasswordBcrypt), cost: cost, cred: cred[:]}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	minCost = min(minCost, maxCost) // no users: one dummy, at bcrypt.MinCost
	for c := minCost; c <= maxCost; c++ {
		dummy, err := bcrypt.GenerateFromPassword([]byte("no such user"), c)
		if err != nil {
			return nil, fmt.Errorf("users: %w", err)
		}
		d.dummies[c] = dummy
	}
	d.maxCost = maxCost
	return d, nil
}

// Len returns the number of users.
func (d *Directory) Len() int {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return len(d.users)
}

// Credential returns what the device cookies of doc's account are bound
// to: a digest of its password hash as the users file gives it, so that a
// new password voids every cookie. A rehash in memory (see Authenticate)
// keeps it, so that the cookies survive the upgrade and every replica
// agrees. An unknown document gets nil, which no cookie was signed for.
func (d *Directory) Credential(doc Document) []byte {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.users[doc].cred
}

// Authenticate returns the user whose document and password match. Every
// call does the same hashing work (see [Directory]). A successful login on
// an account whose hash is cheaper than the directory's highest cost
// rehashes the password at that cost; the new hash lives in this
// directory's memory (the users file is read-only), so each replica
// upgrades on its own.
func (d *Directory) Authenticate(doc Document, password string) (User, bool) {
	d.mu.RLock()
	u, known := d.users[doc]
	d.mu.RUnlock()
	hash, cost := u.hash, u.cost
	if !known {
		hash, cost = d.dummies[d.maxCost], d.maxCost
	}
	compare := d.compare
	if compare == nil {
		compare = bcrypt.CompareHashAndPassword
	}
	ok := compare(hash, []byte(password)) == nil
	for c := cost; c < d.maxCost; c++ {
		_ = compare(d.dummies[c], []byte(password))
	}
	if !ok || !known {
		return User{}, false
	}
	if u.cost < d.maxCost {
		d.rehash(u, password)
	}
	return u, true
}

// rehash replaces u's hash with one of the directory's highest cost, unless
// another login replaced it first.
func (d *Directory) rehash(u User, password string) {
	generate := d.generate
	if generate == nil {
		generate = bcrypt.GenerateFromPassword
	}
	hash, err := generate([]byte(password), d.maxCost)
	if err != nil {
		return // keep the old hash: it still works
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if cur, ok := d.users[u.Document]; ok && bytes.Equal(cur.hash, u.hash) {
		cur.hash, cur.cost = hash, d.maxCost
		d.users[u.Document] = cur
	}
}

// DemoPassword is the password of every account in [DemoDirectory].
const DemoPassword = "floodgate-demo"

// DemoDocuments returns the CPFs of the built-in demo directory: n
// accounts, the CPFs 000.000.001-91, 000.000.002-72, ... (the base numbers
// 1..n with their check digits).
func DemoDocuments(n int) []Document {
	docs := make([]Document, n)
	for i := range n {
		base := fmt.Sprintf("%09s", strconv.Itoa(i+1))
		d1 := checkDigit(base, cpfWeights)
		d2 := checkDigit(base+string(d1), cpfWeights)
		docs[i] = Document(base + string(d1) + string(d2))
	}
	return docs
}

// DemoUsers is the size of the built-in demo directory.
const DemoUsers = 100

// DemoDirectory returns the built-in directory used when no users file is
// given: DemoUsers accounts from DemoDocuments, named "Cliente N", all with
// the password DemoPassword (bcrypt cost 10).
func DemoDirectory() (*Directory, error) {
	hash, err := bcrypt.GenerateFromPassword([]byte(DemoPassword), bcrypt.DefaultCost)
	if err != nil {
		return nil, fmt.Errorf("demo users: %w", err)
	}
	docs := DemoDocuments(DemoUsers)
	recs := make([]UserRecord, len(docs))
	for i, doc := range docs {
		recs[i] = UserRecord{Document: string(doc), Name: fmt.Sprintf("Cliente %d", i+1), PasswordBcrypt: string(hash)}
	}
	return NewDirectory(recs)
}
