//go:build !gubernator

package main

import (
	"errors"
	"time"
)

// guberBuilt reports that this build has gubernator: it does not. Build
// the bench with -tags gubernator (scripts/guber-compare.sh does) for the
// gubernator v2 GLOBAL row; the default build leaves its large
// dependency tree (etcd, Kubernetes' client) out of the test command.
const guberBuilt = false

func guberReplicas(int, int64, time.Duration, bool) ([]guberAsk, func(), error) {
	return nil, nil, errors.New("bench: built without gubernator: build with -tags gubernator")
}
