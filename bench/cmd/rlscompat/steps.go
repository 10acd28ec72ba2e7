package main

import (
	pbcore "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// A step is one ShouldRateLimit call, sent to both services.
type step struct {
	name   string
	domain string
	hits   uint32 // the request's hits_addend; 0 means unset (1)
	descs  []desc
	// allow names the allowlist entry whose difference this step must
	// show; empty means the answers must be the same.
	allow string
	// xdsAllow is allow when both services take the configuration over
	// xDS (rlscompat -xds), and xdsWant, for an entry of xdsAllowlist
	// whose difference is from the file mode rather than between the
	// services, the answer both must give.
	xdsAllow, xdsWant string
}

// expect returns the allowlist entry the step must show in the mode, and
// the answer both services must give when that entry is one they agree
// on.
func (s step) expect(xds bool) (allow, want string) {
	if xds {
		return s.xdsAllow, s.xdsWant
	}
	return s.allow, ""
}

// A desc is one descriptor of a step.
type desc struct {
	entries  []string // key, value, key, value, ...
	hits     *uint64  // the descriptor's hits_addend, when set
	perMin   uint32   // a limit override of perMin per minute, when not 0
	negative bool     // is_negative_hits
}

func d(kv ...string) desc { return desc{entries: kv} }

func dh(hits uint64, kv ...string) desc { return desc{entries: kv, hits: &hits} }

// request builds the step's RateLimitRequest.
func (s step) request() *pb.RateLimitRequest {
	r := &pb.RateLimitRequest{Domain: s.domain, HitsAddend: s.hits}
	for _, de := range s.descs {
		pd := &pbcore.RateLimitDescriptor{}
		for i := 0; i+1 < len(de.entries); i += 2 {
			pd.Entries = append(pd.Entries, &pbcore.RateLimitDescriptor_Entry{Key: de.entries[i], Value: de.entries[i+1]})
		}
		if de.hits != nil {
			pd.HitsAddend = wrapperspb.UInt64(*de.hits)
		}
		if de.perMin != 0 {
			pd.Limit = &pbcore.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: de.perMin, Unit: typev3.RateLimitUnit_MINUTE}
		}
		pd.IsNegativeHits = de.negative
		r.Descriptors = append(r.Descriptors, pd)
	}
	return r
}

// script is the sequence: every file of bench/compat/ratelimit/config,
// single and several descriptors, hits_addend on the request and on a
// descriptor, values and keys that no descriptor matches, and a domain
// that is not configured. It runs within one second (see run), so that
// the per-second limits of the README's examples count in one window.
func script() []step {
	mk := []string{"message_type", "marketing", "to_number", "2061111111"}
	num := []string{"to_number", "2061111111"}
	ua := []string{"service", "auth-service", "user", "user-a"}
	ub := []string{"service", "auth-service", "user", "user-b"}
	k1 := []string{"key_1", "value_1", "user", "bkthomps"}
	k2 := []string{"key_2", "value_2", "user", "bkthomps"}
	return []step{
		// Example 1: one key, two values, a request hits_addend.
		{name: "mongo users first", domain: "mongo_cps", descs: []desc{d("database", "users")}},
		{name: "mongo users +498", domain: "mongo_cps", hits: 498, descs: []desc{d("database", "users")}},
		{name: "mongo users last", domain: "mongo_cps", descs: []desc{d("database", "users")}},
		{name: "mongo users over", domain: "mongo_cps", descs: []desc{d("database", "users")}},
		{name: "mongo default", domain: "mongo_cps", descs: []desc{d("database", "default")}},
		{name: "mongo unmatched value", domain: "mongo_cps", descs: []desc{d("database", "orders")}},
		{name: "mongo unmatched key", domain: "mongo_cps", descs: []desc{d("db", "users")}},
		{name: "mongo too deep", domain: "mongo_cps", descs: []desc{d("database", "users", "table", "t")}},

		// Example 2: nested, value-less, several descriptors.
		{name: "marketing alone", domain: "messaging", descs: []desc{d(mk...)}},
		{name: "marketing+number 1", domain: "messaging", descs: []desc{d(mk...), d(num...)}},
		{name: "marketing+number 2", domain: "messaging", descs: []desc{d(mk...), d(num...)}},
		{name: "marketing+number 3", domain: "messaging", descs: []desc{d(mk...), d(num...)}},
		{name: "marketing+number 4", domain: "messaging", descs: []desc{d(mk...), d(num...)}},
		{name: "marketing over, number within", domain: "messaging", descs: []desc{d(mk...), d(num...)}, allow: "all-or-nothing"},
		{name: "number after the denial", domain: "messaging", descs: []desc{d(num...)}, allow: "all-or-nothing"},
		{name: "other marketing number", domain: "messaging", descs: []desc{d("message_type", "marketing", "to_number", "2062222222")}},
		{name: "message_type only", domain: "messaging", descs: []desc{d("message_type", "marketing")}},
		{name: "unmatched message_type", domain: "messaging", descs: []desc{d("message_type", "transactional", "to_number", "2061111111")}},

		// Example 3: most specific match, requests_per_unit 0.
		{name: "ip +10", domain: "edge_proxy_per_ip", hits: 10, descs: []desc{d("remote_address", "50.0.0.1")}},
		{name: "ip over", domain: "edge_proxy_per_ip", descs: []desc{d("remote_address", "50.0.0.1")}},
		{name: "ip denylisted", domain: "edge_proxy_per_ip", descs: []desc{d("remote_address", "50.0.0.5")}},
		{name: "ip other", domain: "edge_proxy_per_ip", descs: []desc{d("remote_address", "50.0.0.2")}},

		// Example 4: depth.
		{name: "example4 two entries", domain: "example4", descs: []desc{d("key", "value", "subkey", "subvalue")}},
		{name: "example4 one entry", domain: "example4", descs: []desc{d("key", "value")}},

		// Example 5: unlimited.
		{name: "ldap unlimited", domain: "internal", descs: []desc{d("ldap", "x")}},
		{name: "azure", domain: "internal", descs: []desc{d("azure", "x")}},
		{name: "ldap and azure", domain: "internal", descs: []desc{d("ldap", "x"), d("azure", "x")}},

		// Example 6: shadow_mode.
		{name: "user-a +10", domain: "example6", hits: 10, descs: []desc{d(ua...)}},
		{name: "user-a over, shadow", domain: "example6", descs: []desc{d(ua...)}},
		{name: "user-b +20", domain: "example6", hits: 20, descs: []desc{d(ub...)}},
		{name: "user-b over", domain: "example6", descs: []desc{d(ub...)}},

		// Example 7: replaces.
		{name: "specific limit", domain: "example7", descs: []desc{d(k1...)}},
		{name: "replacing limit", domain: "example7", descs: []desc{d(k2...)}},
		{name: "both: replaced", domain: "example7", descs: []desc{d(k1...), d(k2...)}},
		{name: "specific limit untouched", domain: "example7", descs: []desc{d(k1...)}},

		// Example 8: detailed_metric.
		{name: "key1 any value", domain: "example8", descs: []desc{d("key1", "foo")}},
		{name: "key1 value1", domain: "example8", descs: []desc{d("key1", "value1")}},

		// Example 9: wildcards.
		{name: "trailing wildcard", domain: "example9", descs: []desc{d("key1", "valueXYZ")}},
		{name: "trailing wildcard, empty rest", domain: "example9", descs: []desc{d("key1", "value")}},
		{name: "trailing wildcard unmatched", domain: "example9", descs: []desc{d("key1", "other")}},
		{name: "middle wildcard", domain: "example9", descs: []desc{d("path", "/api/123/action")}, allow: "wildcard-anywhere", xdsAllow: "wildcard-anywhere"},

		// Example 11: share_threshold, which the RateLimitConfig proto
		// cannot carry: over xDS both services count per value.
		{name: "shared a +5", domain: "example11", descs: []desc{dh(5, "files", "files/a.pdf")}},
		{name: "shared b +5", domain: "example11", descs: []desc{dh(5, "files", "files/b.csv")},
			xdsAllow: "share-threshold", xdsWant: "OK [OK 5 10/HOUR]"},
		{name: "shared c over", domain: "example11", descs: []desc{d("files", "files/c.txt")},
			xdsAllow: "share-threshold", xdsWant: "OK [OK 9 10/HOUR]"},
		{name: "isolated a +10", domain: "example11", descs: []desc{dh(10, "files_no_share", "files_no_share/a.pdf")}},
		{name: "isolated b", domain: "example11", descs: []desc{d("files_no_share", "files_no_share/b.csv")}},

		// Nested, three levels; descriptor hits_addend beside a request one.
		{name: "tenant", domain: "nested", descs: []desc{d("tenant", "acme")}},
		{name: "tenant path user", domain: "nested", hits: 2, descs: []desc{d("tenant", "acme", "path", "/v1/x", "user", "u1")}},
		{name: "tenant path", domain: "nested", descs: []desc{dh(3, "tenant", "acme", "path", "/v2/x")}},
		{name: "tenant path user, two", domain: "nested", descs: []desc{d("tenant", "acme", "path", "/v1/x", "user", "u1"), dh(2, "tenant", "acme")}},
		{name: "gold path", domain: "nested", descs: []desc{dh(6, "tenant", "gold", "path", "/v1/x")}},
		{name: "gold path over", domain: "nested", descs: []desc{d("tenant", "gold", "path", "/v1/x")}},
		{name: "gold alone", domain: "nested", descs: []desc{d("tenant", "gold")}},
		{name: "wildcard level without limit", domain: "nested", descs: []desc{d("tenant", "acme", "path", "/v1/x")}},

		// A denied hits_addend: floodgate records nothing of it (from
		// files; over xDS it counts past the limit, as upstream does).
		{name: "azure +98", domain: "internal", descs: []desc{dh(98, "azure", "y")}},
		{name: "azure +5 denied", domain: "internal", descs: []desc{dh(5, "azure", "y")}, allow: "denied-not-counted"},
		{name: "azure +1 after the denial", domain: "internal", descs: []desc{d("azure", "y")}, allow: "denied-not-counted"},

		// A descriptor hits_addend of 0.
		{name: "peek, nothing counted yet", domain: "internal", descs: []desc{dh(0, "azure", "z")}},
		{name: "azure z +60", domain: "internal", descs: []desc{dh(60, "azure", "z")}},
		{name: "peek below the limit", domain: "internal", descs: []desc{dh(0, "azure", "z")}},
		{name: "azure z +40", domain: "internal", descs: []desc{dh(40, "azure", "z")}},
		{name: "peek at the limit", domain: "internal", descs: []desc{dh(0, "azure", "z")}, allow: "peek"},
		{name: "peek beside a hit", domain: "internal", descs: []desc{dh(0, "azure", "z"), d("azure", "w")}, allow: "peek"},
		{name: "the hit beside the peek", domain: "internal", descs: []desc{d("azure", "w")}, allow: "peek"},
		{name: "peek over the limit", domain: "edge_proxy_per_ip", descs: []desc{dh(0, "remote_address", "50.0.0.1")}},

		// Keys and values are pairs: key "a" with value "b_c" is not key
		// "a_b" with value "c".
		{name: "joined key_value", domain: "collide", descs: []desc{d("a", "b_c")}, allow: "pairs", xdsAllow: "pairs"},
		{name: "the pair itself", domain: "collide", descs: []desc{d("a_b", "c")}, allow: "pairs", xdsAllow: "pairs"},

		// A limit override (Envoy's rate limit action with a limit):
		// a fixed window of its own, in a configured domain.
		{name: "override 2/min", domain: "mongo_cps", descs: []desc{{entries: []string{"database", "users"}, perMin: 2}}},
		{name: "override 2/min again", domain: "mongo_cps", descs: []desc{{entries: []string{"database", "users"}, perMin: 2}}},
		{name: "override 2/min over", domain: "mongo_cps", descs: []desc{{entries: []string{"database", "users"}, perMin: 2}}},
		{name: "override of an unmatched value", domain: "mongo_cps", descs: []desc{{entries: []string{"database", "orders"}, perMin: 2}}},

		// is_negative_hits: refused here, counted as positive there.
		{name: "is_negative_hits", domain: "internal", descs: []desc{{entries: []string{"azure", "n"}, negative: true}}, allow: "negative-hits", xdsAllow: "negative-hits"},

		// A domain that is not configured.
		{name: "unknown domain", domain: "no_such_domain", descs: []desc{d("key", "value")}},
		{name: "unknown domain, two", domain: "no_such_domain", hits: 3, descs: []desc{d("a", "b"), d("c", "d")}},
	}
}
