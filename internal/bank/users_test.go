package bank

import (
	"slices"
	"strings"
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

// Every login costs a comparison at the directory's highest cost: for an
// unknown document, for an account of that cost, and for an account whose
// hash is cheaper (an old cost), which would otherwise answer faster than
// an unknown document and so give itself away.
func TestEveryLoginPaysTheHighestCost(t *testing.T) {
	cheap, _ := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost)
	dear, _ := bcrypt.GenerateFromPassword([]byte("right"), bcrypt.MinCost+2)
	docs := DemoDocuments(3)
	d, err := NewDirectory([]UserRecord{
		{Document: string(docs[0]), PasswordBcrypt: string(cheap)},
		{Document: string(docs[1]), PasswordBcrypt: string(dear)},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		doc      Document
		password string
		ok       bool
	}{
		{"cheap account, right password", docs[0], "right", true},
		{"cheap account, wrong password", docs[0], "wrong", false},
		{"account of the highest cost", docs[1], "wrong", false},
		{"unknown document", docs[2], "right", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var costs []int
			d.compare = func(hash, password []byte) error {
				c, _ := bcrypt.Cost(hash)
				costs = append(costs, c)
				return bcrypt.CompareHashAndPassword(hash, password)
			}
			if _, ok := d.Authenticate(tc.doc, tc.password); ok != tc.ok {
				t.Fatalf("Authenticate = %v, want %v", ok, tc.ok)
			}
			if !slices.Contains(costs, bcrypt.MinCost+2) {
				t.Fatalf("comparisons at costs %v: none at the directory's highest, %d", costs, bcrypt.MinCost+2)
			}
		})
	}
}
