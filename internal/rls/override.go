package rls

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
	"time"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
)

// override applies a descriptor's per-request limit override (Envoy's
// rate limit action with a limit, from dynamic metadata): as in
// envoyproxy/ratelimit, it replaces whatever the configuration says of
// the descriptor, in a configured domain, and is never in shadow mode.
// It counts in a fixed window aligned to the epoch, under a rule of its
// own per domain, entry keys, limit and window (so two overrides of one
// descriptor count apart). The descriptor keeps its configured failure_mode, or error.
func override(domain string, entries []rlmatch.Entry, lo *commonv3.RateLimitDescriptor_RateLimitOverride, m rlmatch.Match) (rlmatch.Match, error) {
	unit := rlmatch.Unit(lo.GetUnit())
	if unit == rlmatch.UnitUnknown || unit.Window() == 0 {
		return m, invalid("limit override: unit %v is not second, minute, hour, day, week, month or year", lo.GetUnit())
	}
	mult := int64(1)
	if um := lo.GetUnitMultiplier(); um != nil && um.GetValue() > 1 {
		mult = int64(um.GetValue())
	}
	window := unit.Window() * time.Duration(mult)
	if window/time.Duration(mult) != unit.Window() {
		return m, invalid("limit override: %d %vs is too long a window", mult, unit)
	}
	h := sha256.New()
	h.Write([]byte(domain))
	// The key envoyproxy/ratelimit reports an override's statistics
	// under: the domain and every entry, KEY_VALUE (KEY alone for an
	// empty value), as the request has them.
	var stat strings.Builder
	stat.WriteString(domain)
	for _, e := range entries {
		stat.WriteByte('.')
		stat.WriteString(e.Key)
		if e.Value != "" {
			stat.WriteByte('_')
			stat.WriteString(e.Value)
		}
	}
	var key strings.Builder
	key.WriteString("override/")
	key.WriteString(url.QueryEscape(domain))
	for _, e := range entries {
		h.Write([]byte{0})
		h.Write([]byte(e.Key))
		key.WriteByte('/')
		key.WriteString(url.QueryEscape(e.Key))
		key.WriteByte('=')
		key.WriteString(url.QueryEscape(e.Value))
	}
	rpu := int64(lo.GetRequestsPerUnit())
	// The limit and window name the rule too: two overrides of one
	// descriptor in one request are two rules, each checked, never one
	// hit that only the first would count.
	fmt.Fprintf(h, "\x00%d\x00%d", rpu, window)
	name := "override-" + hex.EncodeToString(h.Sum(nil))[:16]
	rule, err := floodgate.NewRule(name, max(rpu, 1), window, floodgate.FixedWindow)
	if err != nil {
		return m, invalid("limit override: %v", err)
	}
	rule.Limit = rpu
	l := &rlmatch.Limit{Rule: rule, Label: domain + ".override", Path: domain + ".override", RequestsPerUnit: rpu}
	if mult == 1 {
		l.Unit = unit
	}
	mode := enforce.FailError
	if m.Outcome == rlmatch.Limited || m.Outcome == rlmatch.Unlimited {
		mode = m.FailureMode
	}
	return rlmatch.Match{Outcome: rlmatch.Limited, Limits: []*rlmatch.Limit{l}, Path: l.Path, Key: key.String(), MetricKey: stat.String(), FailureMode: mode}, nil
}
