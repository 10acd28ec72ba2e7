package httplimit_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate/httplimit"
)

// New refuses Options without an Enforcer, with an error that says how to
// build one.
func TestNewNeedsAnEnforcer(t *testing.T) {
	hl, err := httplimit.New(httplimit.Options{NoLegacyHeaders: true})
	if hl != nil || !errors.Is(err, httplimit.ErrInvalidOptions) || !strings.Contains(err.Error(), "Options.Enforcer is nil: build one with enforce.New") {
		t.Errorf("New without an Enforcer = %v, %v; want ErrInvalidOptions saying to build one with enforce.New", hl, err)
	}
}
