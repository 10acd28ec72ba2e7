package floodgate

// MustRule returns r, and panics if err is not nil. It is for rules built
// from constants when a program starts, as in
//
//	var pix = floodgate.MustRule(floodgate.PerMinute("pix", 10))
//
// where a bad rule is a bug to find at once, like regexp.MustCompile. Rules
// built from configuration should handle the error instead.
func MustRule(r Rule, err error) Rule {
	if err != nil {
		panic(err)
	}
	return r
}
