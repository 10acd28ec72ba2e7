package bank

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"

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
	cost     int // of hash
}

// Directory finds users by document and checks passwords. Its zero value is
// empty; it is read-only after construction and safe for concurrent use.
type Directory struct {
	users map[Document]User
	// dummy is a hash of the directory's highest cost, maxCost, checked
	// for unknown documents, and after the account's own hash for accounts
	// of a lower cost, so that every login costs at least one comparison
	// at maxCost: an answer's timing tells neither whether the document is
	// an account nor whether its hash is an old, cheaper one.
	dummy   []byte
	maxCost int
	// compare is bcrypt.CompareHashAndPassword (nil means it too); tests
	// count its calls.
	compare func(hash, password []byte) error
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
	d := &Directory{users: make(map[Document]User, len(recs)), compare: bcrypt.CompareHashAndPassword}
	var errs []error
	maxCost := bcrypt.MinCost
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
		maxCost = max(maxCost, cost)
		d.users[doc] = User{Document: doc, Name: rec.Name, hash: []byte(rec.PasswordBcrypt), cost: cost}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	dummy, err := bcrypt.GenerateFromPassword([]byte("no such user"), maxCost)
	if err != nil {
		return nil, fmt.Errorf("users: %w", err)
	}
	d.dummy, d.maxCost = dummy, maxCost
	return d, nil
}

// Len returns the number of users.
func (d *Directory) Len() int { return len(d.users) }

// Authenticate returns the user whose document and password match. Every
// call costs at least one bcrypt comparison at the directory's highest
// cost: an unknown document is compared with a dummy hash of that cost,
// and an account whose hash has a lower cost is compared with the dummy
// too, after its own, so timing tells neither whether an account exists
// nor whether its hash is cheaper.
func (d *Directory) Authenticate(doc Document, password string) (User, bool) {
	u, known := d.users[doc]
	hash := u.hash
	if !known {
		hash = d.dummy
	}
	compare := d.compare
	if compare == nil {
		compare = bcrypt.CompareHashAndPassword
	}
	ok := compare(hash, []byte(password)) == nil
	if known && u.cost < d.maxCost {
		_ = compare(d.dummy, []byte(password))
	}
	return u, ok && known
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
