package rlconfig_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/memstore"
	"github.com/floodgate-rl/floodgate/rlconfig"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// writeDir writes files (name to contents) into a new temporary
// directory and returns it.
func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func load(t *testing.T, files map[string]string) *rlconfig.Config {
	t.Helper()
	cfg, err := rlconfig.LoadDir(writeDir(t, files), rlconfig.Options{})
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	return cfg
}

// e builds entries from key, value pairs.
func e(kv ...string) []rlmatch.Entry {
	es := make([]rlmatch.Entry, 0, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		es = append(es, rlmatch.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return es
}

// lim is the part of a Limit that the match tables compare.
type lim struct {
	Label     string
	Name      string
	RPU       int64
	Unit      rlmatch.Unit
	Shadow    bool
	Unlimited bool
	Blocked   bool
}

// got is the part of a Match that the tables compare, field by field.
type got struct {
	Outcome   rlmatch.Outcome
	Path      string
	Key       string
	MetricKey string
	Detailed  bool
	Limits    []lim
	Replaced  []lim
}

func lims(ls []*rlmatch.Limit) []lim {
	var out []lim
	for _, l := range ls {
		out = append(out, lim{l.Label, l.Name, l.RequestsPerUnit, l.Unit, l.ShadowMode, l.Unlimited, l.Blocked()})
	}
	return out
}

func summarize(m rlmatch.Match) got {
	return got{m.Outcome, m.Path, m.Key, m.MetricKey, m.DetailedMetric, lims(m.Limits), lims(m.Replaced)}
}

func checkMatch(t *testing.T, m rlmatch.Match, want got) {
	t.Helper()
	g := summarize(m)
	if g.Outcome != want.Outcome {
		t.Errorf("Outcome = %v, want %v", g.Outcome, want.Outcome)
	}
	if g.Path != want.Path {
		t.Errorf("Path = %q, want %q", g.Path, want.Path)
	}
	if g.Key != want.Key {
		t.Errorf("Key = %q, want %q", g.Key, want.Key)
	}
	if g.MetricKey != want.MetricKey {
		t.Errorf("MetricKey = %q, want %q", g.MetricKey, want.MetricKey)
	}
	if g.Detailed != want.Detailed {
		t.Errorf("DetailedMetric = %v, want %v", g.Detailed, want.Detailed)
	}
	if !reflect.DeepEqual(g.Limits, want.Limits) {
		t.Errorf("Limits =\n  %+v\nwant\n  %+v", g.Limits, want.Limits)
	}
	if !reflect.DeepEqual(g.Replaced, want.Replaced) {
		t.Errorf("Replaced =\n  %+v\nwant\n  %+v", g.Replaced, want.Replaced)
	}
}

// TestReadmeExamples loads envoyproxy/ratelimit's README examples
// (testdata/envoy) together and checks each matching rule it states.
func TestReadmeExamples(t *testing.T) {
	cfg, err := rlconfig.LoadDir("testdata/envoy", rlconfig.Options{})
	if err != nil {
		t.Fatalf("LoadDir: %v", err)
	}
	wantDomains := []string{"edge_proxy_per_ip", "example10", "example11", "example4", "example4_shallow", "example6", "example7", "example8", "example9", "internal", "messaging", "mongo_cps"}
	if d := cfg.Domains(); !reflect.DeepEqual(d, wantDomains) {
		t.Errorf("Domains = %v, want %v", d, wantDomains)
	}
	none := got{Outcome: rlmatch.NoLimit}
	tests := []struct {
		name    string
		domain  string
		entries []rlmatch.Entry
		want    got
	}{
		{"ex1 users", "mongo_cps", e("database", "users"), got{
			Outcome: rlmatch.Limited, Path: "mongo_cps.database_users", Key: "mongo_cps/database=users", MetricKey: "mongo_cps.database_users",
			Limits: []lim{{Label: "mongo_cps.database_users", RPU: 500, Unit: rlmatch.Second}}}},
		{"ex1 unlisted value", "mongo_cps", e("database", "other"), none},
		{"ex1 wrong key", "mongo_cps", e("table", "users"), none},
		{"ex2 nested marketing", "messaging", e("message_type", "marketing", "to_number", "2061111111"), got{
			Outcome: rlmatch.Limited, Path: "messaging.message_type_marketing.to_number",
			Key: "messaging/message_type=marketing/to_number=2061111111", MetricKey: "messaging.message_type_marketing.to_number",
			Limits: []lim{{Label: "messaging.message_type_marketing.to_number", RPU: 5, Unit: rlmatch.Day}}}},
		{"ex2 any number", "messaging", e("to_number", "2062222222"), got{
			Outcome: rlmatch.Limited, Path: "messaging.to_number", Key: "messaging/to_number=2062222222", MetricKey: "messaging.to_number",
			Limits: []lim{{Label: "messaging.to_number", RPU: 100, Unit: rlmatch.Day}}}},
		{"ex2 placeholder has no limit", "messaging", e("message_type", "marketing"), got{Outcome: rlmatch.NoLimit, Path: "messaging.message_type_marketing"}},
		{"ex2 other message type", "messaging", e("message_type", "transactional", "to_number", "1"), none},
		{"ex3 generic ip", "edge_proxy_per_ip", e("remote_address", "50.0.0.1"), got{
			Outcome: rlmatch.Limited, Path: "edge_proxy_per_ip.remote_address", Key: "edge_proxy_per_ip/remote_address=50.0.0.1", MetricKey: "edge_proxy_per_ip.remote_address",
			Limits: []lim{{Label: "edge_proxy_per_ip.remote_address", RPU: 10, Unit: rlmatch.Second}}}},
		{"ex3 blocked ip wins over key", "edge_proxy_per_ip", e("remote_address", "50.0.0.5"), got{
			Outcome: rlmatch.Limited, Path: "edge_proxy_per_ip.remote_address_50.0.0.5", Key: "edge_proxy_per_ip/remote_address=50.0.0.5", MetricKey: "edge_proxy_per_ip.remote_address_50.0.0.5",
			Limits: []lim{{Label: "edge_proxy_per_ip.remote_address_50.0.0.5", RPU: 0, Unit: rlmatch.Second, Blocked: true}}}},
		{"ex4 deeper request than config", "example4_shallow", e("key", "value", "subkey", "subvalue"), none},
		{"ex4 shallow matches one entry", "example4_shallow", e("key", "value"), got{
			Outcome: rlmatch.Limited, Path: "example4_shallow.key_value", Key: "example4_shallow/key=value", MetricKey: "example4_shallow.key_value",
			Limits: []lim{{Label: "example4_shallow.key_value", RPU: 300, Unit: rlmatch.Second}}}},
		{"ex4 nested", "example4", e("key", "value", "subkey", "subvalue"), got{
			Outcome: rlmatch.Limited, Path: "example4.key_value.subkey", Key: "example4/key=value/subkey=subvalue", MetricKey: "example4.key_value.subkey",
			Limits: []lim{{Label: "example4.key_value.subkey", RPU: 300, Unit: rlmatch.Second}}}},
		{"ex4 shorter request than config", "example4", e("key", "value"), got{Outcome: rlmatch.NoLimit, Path: "example4.key_value"}},
		{"ex5 unlimited", "internal", e("ldap", "cn=x"), got{
			Outcome: rlmatch.Unlimited, Path: "internal.ldap", MetricKey: "internal.ldap",
			Limits: []lim{{Label: "internal.ldap", Unlimited: true}}}},
		{"ex5 limited", "internal", e("azure", "x"), got{
			Outcome: rlmatch.Limited, Path: "internal.azure", Key: "internal/azure=x", MetricKey: "internal.azure",
			Limits: []lim{{Label: "internal.azure", RPU: 100, Unit: rlmatch.Minute}}}},
		{"ex6 shadow user", "example6", e("service", "auth-service", "user", "user-a"), got{
			Outcome: rlmatch.Limited, Path: "example6.service.user_user-a", Key: "example6/service=auth-service/user=user-a", MetricKey: "example6.service.user_user-a",
			Limits: []lim{{Label: "example6.service.user_user-a", RPU: 10, Unit: rlmatch.Second, Shadow: true}}}},
		{"ex6 enforced user", "example6", e("service", "auth-service", "user", "user-b"), got{
			Outcome: rlmatch.Limited, Path: "example6.service.user_user-b", Key: "example6/service=auth-service/user=user-b", MetricKey: "example6.service.user_user-b",
			Limits: []lim{{Label: "example6.service.user_user-b", RPU: 20, Unit: rlmatch.Second}}}},
		{"ex8 detailed unlisted value", "example8", e("key1", "unspecified_value"), got{
			Outcome: rlmatch.Limited, Path: "example8.key1", Key: "example8/key1=unspecified_value", MetricKey: "example8.key1_unspecified_value", Detailed: true,
			Limits: []lim{{Label: "example8.key1", RPU: 10, Unit: rlmatch.Minute}}}},
		{"ex8 listed value", "example8", e("key1", "value1"), got{
			Outcome: rlmatch.Limited, Path: "example8.key1_value1", Key: "example8/key1=value1", MetricKey: "example8.key1_value1",
			Limits: []lim{{Label: "example8.key1_value1", RPU: 20, Unit: rlmatch.Minute}}}},
		{"ex9 trailing wildcard", "example9", e("key1", "valueXYZ"), got{
			Outcome: rlmatch.Limited, Path: "example9.key1_value*", Key: "example9/key1=valueXYZ", MetricKey: "example9.key1_value*",
			Limits: []lim{{Label: "example9.key1_value*", RPU: 20, Unit: rlmatch.Minute}}}},
		{"ex9 trailing wildcard matches the bare prefix", "example9", e("key1", "value"), got{
			Outcome: rlmatch.Limited, Path: "example9.key1_value*", Key: "example9/key1=value", MetricKey: "example9.key1_value*",
			Limits: []lim{{Label: "example9.key1_value*", RPU: 20, Unit: rlmatch.Minute}}}},
		{"ex9 trailing wildcard other prefix", "example9", e("key1", "valu"), none},
		{"ex9 middle wildcard", "example9", e("path", "/api/123/action"), got{
			Outcome: rlmatch.Limited, Path: "example9.path_/api/*/action", Key: "example9/path=%2Fapi%2F123%2Faction", MetricKey: "example9.path_/api/*/action",
			Limits: []lim{{Label: "example9.path_/api/*/action", RPU: 20, Unit: rlmatch.Minute}}}},
		{"ex9 middle wildcard wrong suffix", "example9", e("path", "/api/123/other"), none},
		{"ex9 two wildcards", "example9", e("route", "/api/v1/resource/123/action"), got{
			Outcome: rlmatch.Limited, Path: "example9.route_/api/*/resource/*/action", Key: "example9/route=%2Fapi%2Fv1%2Fresource%2F123%2Faction", MetricKey: "example9.route_/api/*/resource/*/action",
			Limits: []lim{{Label: "example9.route_/api/*/resource/*/action", RPU: 20, Unit: rlmatch.Minute}}}},
		{"ex9 two wildcards out of order", "example9", e("route", "/api/v1/action/resource"), none},
		{"ex10 value_to_metric", "example10", e("route", "api", "http_method", "GET", "subject_id", "123"), got{
			Outcome: rlmatch.Limited, Path: "example10.route.http_method.subject_id", Key: "example10/route=api/http_method=GET/subject_id=123",
			MetricKey: "example10.route_api.http_method_GET.subject_id",
			Limits:    []lim{{Label: "example10.route.http_method.subject_id", RPU: 60, Unit: rlmatch.Minute}}}},
		{"ex11 shared threshold", "example11", e("files", "files/a.pdf"), got{
			Outcome: rlmatch.Limited, Path: "example11.files_files/*", Key: "example11/files=files%2F%2A", MetricKey: "example11.files_files/*",
			Limits: []lim{{Label: "example11.files_files/*", RPU: 10, Unit: rlmatch.Hour}}}},
		{"ex11 isolated threshold", "example11", e("files_no_share", "files_no_share/a.pdf"), got{
			Outcome: rlmatch.Limited, Path: "example11.files_no_share_files_no_share/*", Key: "example11/files_no_share=files_no_share%2Fa.pdf", MetricKey: "example11.files_no_share_files_no_share/*",
			Limits: []lim{{Label: "example11.files_no_share_files_no_share/*", RPU: 10, Unit: rlmatch.Hour}}}},
		{"unknown domain", "nope", e("database", "users"), got{Outcome: rlmatch.UnknownDomain}},
		{"no entries", "mongo_cps", nil, none},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkMatch(t, cfg.Match(tc.domain, tc.entries), tc.want)
		})
	}
}

// TestReplaces walks example 7 of envoyproxy/ratelimit's README.
func TestReplaces(t *testing.T) {
	cfg, err := rlconfig.LoadDir("testdata/envoy", rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	specific := lim{Label: "specific_limit", Name: "specific_limit", RPU: 5, Unit: rlmatch.Second}
	replacer := lim{Label: "example7.key_2_value_2.user_bkthomps", RPU: 10, Unit: rlmatch.Second}
	d1 := e("key_1", "value_1", "user", "bkthomps")
	d2 := e("key_2", "value_2", "user", "bkthomps")

	ms := cfg.MatchAll("example7", [][]rlmatch.Entry{d1})
	checkMatch(t, ms[0], got{Outcome: rlmatch.Limited, Path: "example7.key_1_value_1.user_bkthomps", Key: "example7/key_1=value_1/user=bkthomps",
		MetricKey: "example7.key_1_value_1.user_bkthomps", Limits: []lim{specific}})

	ms = cfg.MatchAll("example7", [][]rlmatch.Entry{d1, d2})
	if len(ms) != 2 {
		t.Fatalf("MatchAll returned %d matches, want 2", len(ms))
	}
	checkMatch(t, ms[0], got{Outcome: rlmatch.NoLimit, Path: "example7.key_1_value_1.user_bkthomps",
		MetricKey: "example7.key_1_value_1.user_bkthomps", Replaced: []lim{specific}})
	checkMatch(t, ms[1], got{Outcome: rlmatch.Limited, Path: "example7.key_2_value_2.user_bkthomps", Key: "example7/key_2=value_2/user=bkthomps",
		MetricKey: "example7.key_2_value_2.user_bkthomps", Limits: []lim{replacer}})

	// Match alone does not replace, and MatchAll left the shared limits
	// untouched.
	checkMatch(t, cfg.Match("example7", d1), got{Outcome: rlmatch.Limited, Path: "example7.key_1_value_1.user_bkthomps", Key: "example7/key_1=value_1/user=bkthomps",
		MetricKey: "example7.key_1_value_1.user_bkthomps", Limits: []lim{specific}})
}

// TestMatchOrder checks the precedence at one level: key and value, then
// wildcards in the order written, then the key alone; and that a level
// falls through only when the more specific descriptor is absent, not
// when it has no deeper match.
func TestMatchOrder(t *testing.T) {
	cfg := load(t, map[string]string{"order.yaml": `
domain: order
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: k
    value: "ab*"
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: k
    value: "a*"
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: k
    value: abc
    rate_limit: {unit: second, requests_per_unit: 4}
  - key: k
    value: "*"
    rate_limit: {unit: second, requests_per_unit: 5}
  - key: k
    value: free                 # a value without a limit is allowed outright
  - key: both
    value: v
    rate_limit: {unit: day, requests_per_unit: 10}
    descriptors:
      - key: sub
        value: s
        rate_limit: {unit: day, requests_per_unit: 11}
  - key: lit
    value: "*"
    rate_limit: {unit: second, requests_per_unit: 8}
  - key: lit
    value: "x*"
    rate_limit: {unit: second, requests_per_unit: 9}
  - key: nest
    value: x
    descriptors:
      - key: inner
        value: "1"
        rate_limit: {unit: minute, requests_per_unit: 6}
  - key: nest
    descriptors:
      - key: inner
        rate_limit: {unit: minute, requests_per_unit: 7}
`})
	rpu := func(m rlmatch.Match) int64 {
		if len(m.Limits) != 1 {
			return -1
		}
		return m.Limits[0].RequestsPerUnit
	}
	tests := []struct {
		entries []rlmatch.Entry
		want    int64
	}{
		{e("k", "abc"), 4},   // exact value first
		{e("k", "abd"), 2},   // then the first wildcard written
		{e("k", "ax"), 3},    // the next wildcard
		{e("k", "zzz"), 5},   // "*" before the bare key
		{e("k", ""), 5},      // "*" matches the empty value
		{e("k", "free"), -1}, // the value wins over the bare key, and has no limit
		{e("both", "v"), 10}, // a limit on a level that also has children
		{e("both", "v", "sub", "s"), 11},
		{e("both", "v", "sub", "t"), -1},
		{e("lit", "xy"), 8}, // the first wildcard written wins
		{e("lit", "x*"), 9}, // a value written with its "*" is exact
		{e("nest", "x", "inner", "1"), 6},
		{e("nest", "y", "inner", "1"), 7},
		{e("nest", "x", "inner", "2"), -1}, // x matched: no fallback to the bare key one level up
		{e("nest", "y"), -1},
		{e("k", "abc", "more", "x"), -1},
	}
	for _, tc := range tests {
		if got := rpu(cfg.Match("order", tc.entries)); got != tc.want {
			t.Errorf("Match(%v) limit = %d, want %d", tc.entries, got, tc.want)
		}
	}
}

// TestHitKeys checks that the key separates what must be counted apart
// and joins what must be counted together.
func TestHitKeys(t *testing.T) {
	cfg, err := rlconfig.LoadDir("testdata/envoy", rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := func(domain string, kv ...string) string { return cfg.Match(domain, e(kv...)).Key }
	if a, b := key("messaging", "to_number", "1"), key("messaging", "to_number", "2"); a == b {
		t.Errorf("two numbers share key %q", a)
	}
	if a, b := key("messaging", "to_number", "1"), key("messaging", "to_number", "1"); a != b {
		t.Errorf("one number has keys %q and %q", a, b)
	}
	if a, b := key("example11", "files", "files/a.pdf"), key("example11", "files", "files/b.csv"); a != b {
		t.Errorf("share_threshold values have keys %q and %q, want one", a, b)
	}
	if a, b := key("example11", "files_no_share", "files_no_share/a"), key("example11", "files_no_share", "files_no_share/b"); a == b {
		t.Errorf("isolated wildcard values share key %q", a)
	}
	// share_threshold on a wildcard level above the limit still shares.
	nested := load(t, map[string]string{"n.yaml": `
domain: n
descriptors:
  - key: route
    value: "api/*"
    share_threshold: true
    detailed_metric: true
    descriptors:
      - key: method
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 60}
`})
	a := nested.Match("n", e("route", "api/v1", "method", "GET"))
	b := nested.Match("n", e("route", "api/v2", "method", "GET"))
	c := nested.Match("n", e("route", "api/v2", "method", "PUT"))
	if a.Key != b.Key || a.Key == c.Key {
		t.Errorf("nested share_threshold keys: %q %q %q", a.Key, b.Key, c.Key)
	}
	if a.MetricKey != "n.route_api/*.method_GET" {
		t.Errorf("nested share_threshold metric key %q", a.MetricKey)
	}

	// Separators inside values cannot forge another descriptor's key.
	cfg2 := load(t, map[string]string{"a.yaml": `
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 1}
`})
	k1 := cfg2.Match("d", e("a", "x/b=y", "b", "z")).Key
	k2 := cfg2.Match("d", e("a", "x", "b", "y/b=z")).Key
	if k1 == k2 {
		t.Errorf("forged values share key %q", k1)
	}
	hits := cfg2.Match("d", e("a", "x", "b", "y")).Hits(3)
	if len(hits) != 1 || hits[0].Key != "d/a=x/b=y" || hits[0].Cost != 3 || hits[0].Rule.Limit != 1 {
		t.Errorf("Hits = %+v", hits)
	}
	if h := cfg.Match("edge_proxy_per_ip", e("remote_address", "50.0.0.5")).Hits(1); h != nil {
		t.Errorf("a blocked limit has hits %+v", h)
	}
	if h := cfg.Match("internal", e("ldap", "x")).Hits(1); h != nil {
		t.Errorf("an unlimited limit has hits %+v", h)
	}
}

func TestNilConfig(t *testing.T) {
	var cfg *rlconfig.Config
	if m := cfg.Match("d", e("k", "v")); m.Outcome != rlmatch.UnknownDomain {
		t.Errorf("nil Config: %v", m.Outcome)
	}
	if d := cfg.Domains(); d != nil {
		t.Errorf("nil Config domains: %v", d)
	}
}

// A long value is keyed, and labelled under detailed_metric, by its
// digest: a flood of 4 KB values costs no escaping, no 12 KB Redis keys
// and no 4 KB labels, while each value keeps a key
// of its own and a wildcard still matches on the value itself.
func TestLongValuesAreKeyedByDigest(t *testing.T) {
	cfg := load(t, map[string]string{"l.yaml": `
domain: l
descriptors:
  - key: path
    value: "/api/*"
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 60}
`})
	long := func(c byte) string { return "/api/" + strings.Repeat(string(c), 4000) }
	a, b := cfg.Match("l", e("path", long('a'))), cfg.Match("l", e("path", long('b')))
	if a.Outcome != rlmatch.Limited || b.Outcome != rlmatch.Limited {
		t.Fatalf("outcomes %v, %v: the wildcard must match the long values", a.Outcome, b.Outcome)
	}
	if a.Key == b.Key || len(a.Key) > 100 || !strings.Contains(a.Key, "%~") {
		t.Errorf("keys %q and %q: want two short digests", a.Key, b.Key)
	}
	if len(a.MetricKey) > 100 || a.MetricKey == b.MetricKey {
		t.Errorf("metric keys %q and %q: want two short digests", a.MetricKey, b.MetricKey)
	}
	short := cfg.Match("l", e("path", "/api/x%~y"))
	if short.Key != "l/path=%2Fapi%2Fx%25~y" {
		t.Errorf("a short value's key %q, want it escaped as before", short.Key)
	}
}

// A request's descriptor matched and its hits enforced by a floodgate
// Limiter, as the RLS service does (this was the package Example while
// matching was part of the API).
func TestMatchEnforcedByALimiter(t *testing.T) {
	cfg, err := rlconfig.Parse(map[string][]byte{"messaging.yaml": []byte(`
domain: messaging
algorithm: sliding_window
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 2
`)}, rlconfig.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store := memstore.New(memstore.Options{})
	defer store.Close()
	limiter, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Match("messaging", []rlmatch.Entry{{Key: "message_type", Value: "marketing"}, {Key: "to_number", Value: "2061111111"}})
	if got := fmt.Sprint(m.Outcome, " ", m.Limits[0]); got != "limited messaging.message_type_marketing.to_number: 2/day sliding-window" {
		t.Errorf("match: %s", got)
	}
	for i, want := range []struct {
		allowed   bool
		remaining int64
	}{{true, 1}, {true, 0}, {false, 0}} {
		d, err := limiter.Check(context.Background(), m.Hits(1)...)
		if err != nil || d.Allowed != want.allowed || d.Remaining != want.remaining {
			t.Errorf("message %d: allowed=%v remaining=%d err=%v, want allowed=%v remaining=%d", i+1, d.Allowed, d.Remaining, err, want.allowed, want.remaining)
		}
	}
	if got := cfg.Match("billing", nil).Outcome; got != rlmatch.UnknownDomain {
		t.Errorf("an unknown domain: %v", got)
	}
}
