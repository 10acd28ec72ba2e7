package bank

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

func TestDirectory(t *testing.T) {
	hash, _ := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost)
	d, err := ReadUsers(strings.NewReader(`[{"document":"529.982.247-25","name":"Ana","password_bcrypt":"` + string(hash) + `"}]`))
	if err != nil {
		t.Fatal(err)
	}
	if u, ok := d.Authenticate("52998224725", "right"); !ok || u.Name != "Ana" {
		t.Fatalf("right password: %v %v", u, ok)
	}
	if _, ok := d.Authenticate("52998224725", "wrong"); ok {
		t.Fatal("wrong password accepted")
	}
	if _, ok := d.Authenticate("11144477735", "right"); ok {
		t.Fatal("unknown account accepted")
	}
}

func TestZeroDirectoryRefusesEveryone(t *testing.T) {
	var d Directory
	if _, ok := d.Authenticate("52998224725", "anything"); ok {
		t.Fatal("the zero Directory accepted a login")
	}
}

func TestReadUsersListsEveryProblem(t *testing.T) {
	_, err := ReadUsers(strings.NewReader(`[{"document":"123","name":"a","password_bcrypt":"x"},{"document":"529.982.247-25","name":"b","password_bcrypt":"nothash"}]`))
	if err == nil || !strings.Contains(err.Error(), "user 0") || !strings.Contains(err.Error(), "user 1") {
		t.Fatalf("got %v; want both bad users listed", err)
	}
	if _, err := ReadUsers(strings.NewReader(`{"not":"an array"}`)); err == nil {
		t.Fatal("accepted a non-array")
	}
}

func TestDemoDocumentsAreValid(t *testing.T) {
	docs := DemoDocuments(DemoUsers)
	if docs[0] != "00000000191" {
		t.Fatalf("first demo CPF %s, want 00000000191 as documented", docs[0])
	}
	for _, doc := range docs {
		if _, err := ParseDocument(string(doc)); err != nil {
			t.Fatalf("demo document %s: %v", doc, err)
		}
	}
}

// hasher counts the hashing work of a Directory: bcrypt's work at cost c
// is 2^c rounds of its key schedule, so a login's work is the sum of 2^c
// over its comparisons. Timing is noise on a shared machine; the work is
// not.
type hasher struct {
	mu        sync.Mutex
	compares  []int // costs of the comparisons, in order
	generates []int // costs of the hashes generated
}

func (h *hasher) install(d *Directory) {
	d.compare = func(hash, password []byte) error {
		c, _ := bcrypt.Cost(hash)
		h.mu.Lock()
		h.compares = append(h.compares, c)
		h.mu.Unlock()
		return bcrypt.CompareHashAndPassword(hash, password)
	}
	d.generate = func(password []byte, cost int) ([]byte, error) {
		h.mu.Lock()
		h.generates = append(h.generates, cost)
		h.mu.Unlock()
		return bcrypt.GenerateFromPassword(password, cost)
	}
}

// take returns the work of the comparisons since the last call, and the
// costs they ran at, and forgets them.
func (h *hasher) take() (work int, costs []int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.compares {
		work += 1 << c
	}
	costs, h.compares = h.compares, nil
	return work, costs
}

// Every login does the same hashing work, 2^maxCost rounds, whether the
// document is unknown, an account of the highest cost, or an account whose
// hash is cheaper (an old cost), which would otherwise give itself away by
// its timing.
func TestEveryLoginDoesEqualHashingWork(t *testing.T) {
	const low, top = bcrypt.MinCost, bcrypt.MinCost + 3
	cheap, _ := bcrypt.GenerateFromPassword([]byte("right"), low)
	middle, _ := bcrypt.GenerateFromPassword([]byte("right"), low+1)
	dear, _ := bcrypt.GenerateFromPassword([]byte("right"), top)
	docs := DemoDocuments(4)
	for _, tc := range []struct {
		name     string
		doc      Document
		password string
		ok       bool
	}{
		{"cheapest account, wrong password", docs[0], "wrong", false},
		{"cheapest account, right password", docs[0], "right", true},
		{"middle-cost account, wrong password", docs[1], "wrong", false},
		{"middle-cost account, right password", docs[1], "right", true},
		{"account of the highest cost, wrong password", docs[2], "wrong", false},
		{"account of the highest cost, right password", docs[2], "right", true},
		{"unknown document", docs[3], "right", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := NewDirectory([]UserRecord{
				{Document: string(docs[0]), PasswordBcrypt: string(cheap)},
				{Document: string(docs[1]), PasswordBcrypt: string(middle)},
				{Document: string(docs[2]), PasswordBcrypt: string(dear)},
			})
			if err != nil {
				t.Fatal(err)
			}
			var h hasher
			h.install(d)
			if _, ok := d.Authenticate(tc.doc, tc.password); ok != tc.ok {
				t.Fatalf("Authenticate = %v, want %v", ok, tc.ok)
			}
			if work, costs := h.take(); work != 1<<top {
				t.Fatalf("comparisons at costs %v do %d rounds of work; every login must do %d (one comparison at the highest cost, %d)", costs, work, 1<<top, top)
			}
		})
	}
}

// A successful login rehashes a cheaper account at the directory's highest
// cost: from then on its logins are one comparison at that cost, and the
// password still works.
func TestSuccessfulLoginRehashesToTheHighestCost(t *testing.T) {
	const top = bcrypt.MinCost + 2
	cheap, _ := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost)
	dear, _ := bcrypt.GenerateFromPassword([]byte("x"), top)
	docs := DemoDocuments(2)
	d, err := NewDirectory([]UserRecord{
		{Document: string(docs[0]), PasswordBcrypt: string(cheap)},
		{Document: string(docs[1]), PasswordBcrypt: string(dear)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var h hasher
	h.install(d)
	if _, ok := d.Authenticate(docs[0], "wrong"); ok {
		t.Fatal("wrong password accepted")
	}
	if len(h.generates) != 0 {
		t.Fatalf("a failed login rehashed (at costs %v)", h.generates)
	}
	if _, ok := d.Authenticate(docs[0], "right"); !ok {
		t.Fatal("right password refused")
	}
	if !slices.Equal(h.generates, []int{top}) {
		t.Fatalf("a successful login on a cost-%d account generated hashes at costs %v, want one at %d", bcrypt.MinCost, h.generates, top)
	}
	h.take()
	for _, tc := range []struct {
		password string
		ok       bool
	}{{"right", true}, {"wrong", false}} {
		if _, ok := d.Authenticate(docs[0], tc.password); ok != tc.ok {
			t.Fatalf("after the rehash, password %q: Authenticate = %v, want %v", tc.password, ok, tc.ok)
		}
		if _, costs := h.take(); !slices.Equal(costs, []int{top}) {
			t.Fatalf("after the rehash, a login compared at costs %v, want one comparison at %d", costs, top)
		}
	}
	if len(h.generates) != 1 {
		t.Fatalf("an account already at the highest cost was rehashed again: %v", h.generates)
	}
}
