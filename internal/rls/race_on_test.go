//go:build race

package rls_test

// raceEnabled is true under the race detector, which slows every
// goroutine several times: a load test scales itself down by it.
const raceEnabled = true
