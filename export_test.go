package floodgate

// CreditsNothing is the Limiter's test of a lease's refund that would
// credit nothing (grant.creditsNothing): for the lease hit h granted res,
// whose answer came at recv, a refund of unused units sent at now
// (nanoseconds on one clock).
func CreditsNothing(h Hit, res Result, recv, now, unused int64) bool {
	g := &grant{hit: h, res: res, recv: recv}
	return g.creditsNothing(unused, now)
}
