package breakerstore

import "time"

// SetCPUWaits replaces the scheduler reading of s (see Store.schedWaits),
// so that tests decide whether the process was starved for CPU.
func SetCPUWaits(s *Store, waits func(min time.Duration) uint64) { s.cpuWaits = waits }

// SchedWaits exposes the runtime reading itself.
func SchedWaits(s *Store, min time.Duration) uint64 { return s.schedWaits(min) }
