package oracle

import (
	"errors"
	"reflect"
	"time"

	"github.com/floodgate-rl/floodgate"
)

// ErrNoEscrow reports that this build's floodgate has no escrow
// (floodgate.Options.Escrow): the escrow branch is not merged yet.
var ErrNoEscrow = errors.New("oracle: floodgate.Options has no Escrow field in this build (the escrow branch is not merged)")

// escrowOptions returns Limiter options with escrow on and lease period
// period: floodgate.Options{Escrow: floodgate.Escrow{Period: period}}, as
// /work/escrow-api.md describes it. It sets the field by reflection so
// that the oracle builds, and runs its direct and broken modes, before the
// escrow branch is merged, and runs its escrow mode as soon as it is,
// with no change: once merged, replace this with the literal.
func escrowOptions(period time.Duration) (floodgate.Options, error) {
	var opts floodgate.Options
	f := reflect.ValueOf(&opts).Elem().FieldByName("Escrow")
	if !f.IsValid() || f.Kind() != reflect.Struct {
		return opts, ErrNoEscrow
	}
	p := f.FieldByName("Period")
	if !p.IsValid() || p.Type() != reflect.TypeFor[time.Duration]() {
		return opts, ErrNoEscrow
	}
	p.Set(reflect.ValueOf(period))
	return opts, nil
}

// EscrowAvailable reports whether this build's floodgate has escrow.
func EscrowAvailable() bool {
	_, err := escrowOptions(100 * time.Millisecond)
	return err == nil
}
