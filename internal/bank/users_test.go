package bank

import (
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
