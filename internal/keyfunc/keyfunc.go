// Package keyfunc combines the key functions of every transport (an
// *http.Request for httplimit, a context.Context for grpclimit): one
// implementation of Join and First, whatever a key is read from.
package keyfunc

import (
	"slices"
	"strconv"
	"strings"
)

// Join returns the key of all of fs together: the parts are
// length-prefixed, so no two different combinations share a key. The key
// is "" if any part is.
func Join[F ~func(R) string, R any](fs ...F) F {
	fs = slices.Clone(fs) // the caller may reuse its slice
	return func(r R) string {
		var b strings.Builder
		for _, f := range fs {
			k := f(r)
			if k == "" {
				return ""
			}
			b.WriteString(strconv.Itoa(len(k)))
			b.WriteByte(':')
			b.WriteString(k)
		}
		return b.String()
	}
}

// First returns the key of the first of fs that has one, prefixed with
// its index so that keys from different functions never collide; "" when
// none has a key.
func First[F ~func(R) string, R any](fs ...F) F {
	fs = slices.Clone(fs) // the caller may reuse its slice
	return func(r R) string {
		for i, f := range fs {
			if k := f(r); k != "" {
				return strconv.Itoa(i) + ":" + k
			}
		}
		return ""
	}
}
