// Package chaos runs the bank service the way it is deployed (bankapi
// processes sharing a real redis-server, behind a forwarding proxy) under
// continuous mixed load, injects faults at seeded random moments (Redis
// killed and restarted, frozen with SIGSTOP, out of memory, refusing
// writes, its script cache flushed; a replica restarted), and checks from
// the recorded traffic that:
//
//   - no key ever admitted more than its limit in any window of the
//     rule's length (see [Check] for how windows around a Redis restart
//     are treated);
//   - every route answered by its failure mode while the store failed
//     (login and PIX refuse with 429, the statement is served), and how
//     fast (see [Traffic.Latencies]);
//   - the fleet recovered by itself after each fault, and how fast (see
//     [Fault]);
//   - no replica panicked, leaked goroutines or grew in memory.
//
// TestChaos runs it and writes the figures to the log and, when
// CHAOS_RESULTS names a file, to that file (docs/reliability-results.md
// holds a committed run).
package chaos
