package floodgate

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// failingStore fails every call with err.
type failingStore struct{ err error }

func (s failingStore) Take(context.Context, []Hit) ([]Result, error) { return nil, s.err }
func (s failingStore) Peek(context.Context, []Hit) ([]Result, error) { return nil, s.err }
func (s failingStore) Refund(context.Context, []Receipt) error       { return s.err }
func (s failingStore) Reset(context.Context, Rule, string) error     { return s.err }
func (s failingStore) Renew(context.Context, []Receipt) ([]Stamp, error) {
	return nil, s.err
}

// A store error reads as one sentence, each layer named once, and stays
// checkable with errors.Is.
func TestStoreErrorsWrapEachLayerOnce(t *testing.T) {
	r, err := NewRule("pix", 10, time.Minute, SlidingWindow)
	if err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	for _, tc := range []struct {
		err  error
		want string
		is   []error
	}{
		{fmt.Errorf("somestore: %w: %w", ErrStoreUnavailable, context.DeadlineExceeded),
			"floodgate: take: somestore: store unavailable: context deadline exceeded",
			[]error{ErrStoreUnavailable, context.DeadlineExceeded}},
		{boom, "floodgate: take: store unavailable: boom", []error{ErrStoreUnavailable, boom}},
		{fmt.Errorf("somestore: %w", ErrClosed), "floodgate: take: store unavailable: somestore: store closed", []error{ErrStoreUnavailable, ErrClosed}},
	} {
		l, err := New(failingStore{tc.err}, Options{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = l.Allow(context.Background(), r, "k")
		if err == nil || err.Error() != tc.want {
			t.Errorf("Allow on a store failing with %q: %v; want %q", tc.err, err, tc.want)
		}
		for _, target := range tc.is {
			if !errors.Is(err, target) {
				t.Errorf("Allow on a store failing with %q: %v does not wrap %v", tc.err, err, target)
			}
		}
	}
}
