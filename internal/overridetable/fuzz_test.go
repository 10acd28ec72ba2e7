package overridetable

import (
	"testing"
)

// FuzzParseEntry feeds stored fields and values, as anyone with redis-cli
// could write them: parsing never panics, and an entry it accepts is
// valid and reads back the same from the form a Table writes.
func FuzzParseEntry(f *testing.F) {
	f.Add("api:customer-42", "limit=1000/1m0s,algorithm=sliding-window")
	f.Add("api:k", "limit=50/1s,algorithm=token-bucket,burst=200,expires=2026-12-01T00:00:00Z")
	f.Add("login:a:b{c}", "limit=5/m,algorithm=fixed-window")
	f.Add("x:y", "limit=1/1ms,algorithm=sliding-window-counter,expires=2026-12-01T01:00:00.5+01:00")
	f.Add(":", "limit=,burst=")
	f.Fuzz(func(t *testing.T, field, value string) {
		e, err := parseEntry(field, value)
		if err != nil {
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("parseEntry(%q, %q) accepted an invalid entry: %v", field, value, err)
		}
		if e.field() != field {
			t.Fatalf("parseEntry(%q, %q) = field %q", field, value, e.field())
		}
		back, err := parseEntry(e.field(), e.value())
		if err != nil {
			t.Fatalf("the stored form %q of %q does not read back: %v", e.value(), value, err)
		}
		if back.Rule != e.Rule || back.Key != e.Key || !back.Expires.Equal(e.Expires) {
			t.Fatalf("%q reads back as %+v; want %+v", e.value(), back, e)
		}
	})
}
