package rlmatch

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

func policy(unit rlsconf.RateLimitUnit, n uint32) *rlsconf.RateLimitPolicy {
	return &rlsconf.RateLimitPolicy{Unit: unit, RequestsPerUnit: n}
}

// TestProtoFilesReadAsTheirYAML: a resource means what the same
// configuration written as a file means, rule names (and so the counts in
// the store) included.
func TestProtoFilesReadAsTheirYAML(t *testing.T) {
	res := &rlsconf.RateLimitConfig{
		Name:   "default/eg/http",
		Domain: "edge",
		Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "remote_address", RateLimit: policy(rlsconf.RateLimitUnit_MINUTE, 10)},
			{Key: "path", Value: "/login", Descriptors: []*rlsconf.RateLimitDescriptor{
				{Key: "user", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_HOUR, RequestsPerUnit: 5, Name: "login",
					Replaces: []*rlsconf.RateLimitReplace{{Name: "per-ip"}}}, ShadowMode: true, DetailedMetric: true},
			}},
			{Key: "path", Value: "/static*", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
			{Key: "blocked", RateLimit: policy(rlsconf.RateLimitUnit_SECOND, 0)},
			{Key: "day", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_DAY, RequestsPerUnit: 1000, Name: "per-ip"}},
		},
	}
	const written = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: path
    value: /login
    descriptors:
      - key: user
        shadow_mode: true
        detailed_metric: true
        rate_limit:
          unit: hour
          requests_per_unit: 5
          name: login
          replaces: [{name: per-ip}]
  - key: path
    value: /static*
    rate_limit: {unlimited: true}
  - key: blocked
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: day
    rate_limit: {unit: day, requests_per_unit: 1000, name: per-ip}
`
	files, err := ProtoFiles([]*rlsconf.RateLimitConfig{res})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := files["default_eg_http.yaml"]; !ok || len(files) != 1 {
		t.Fatalf("files %v, want one named default_eg_http.yaml", keys(files))
	}
	fromProto, err := Parse(files, Options{})
	if err != nil {
		t.Fatalf("%v\n%s", err, files["default_eg_http.yaml"])
	}
	fromYAML, err := Parse(map[string][]byte{"default_eg_http.yaml": []byte(written)}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fromProto.String(), fromYAML.String(); got != want {
		t.Errorf("from the proto:\n%s\nfrom the YAML:\n%s", got, want)
	}
	gl, wl := fromProto.Limits(), fromYAML.Limits()
	for i := range wl {
		if !reflect.DeepEqual(*gl[i], *wl[i]) {
			t.Errorf("limit %d from the proto %+v, from the YAML %+v", i, *gl[i], *wl[i])
		}
	}
	m := fromProto.Match("edge", []Entry{{"path", "/login"}, {"user", "ana"}})
	if m.Outcome != Limited || len(m.Limits) != 1 || m.Limits[0].Name != "login" || !m.Limits[0].ShadowMode || !m.DetailedMetric {
		t.Errorf("a nested descriptor from the proto matched %+v", m)
	}
	if m := fromProto.Match("edge", []Entry{{"blocked", "x"}}); m.Outcome != Limited || m.Limits[0].RequestsPerUnit != 0 {
		t.Errorf("requests_per_unit 0 must be a limit that denies every request, as upstream reads it; matched %+v", m)
	}
}

// TestProtoFilesNewerFields: quota_mode, metadata and the units week,
// month and year, which the proto compiled in does not define, are read
// from the wire as the newer proto numbers them.
func TestProtoFilesNewerFields(t *testing.T) {
	d := &rlsconf.RateLimitDescriptor{Key: "tenant", RateLimit: policy(rlsconf.RateLimitUnit(5), 100)}
	meta, err := structpb.NewStruct(map[string]any{"team": "payments"})
	if err != nil {
		t.Fatal(err)
	}
	mb, err := proto.Marshal(meta)
	if err != nil {
		t.Fatal(err)
	}
	var unknown []byte
	unknown = protowire.AppendTag(unknown, 7, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, 1)
	unknown = protowire.AppendTag(unknown, 8, protowire.BytesType)
	unknown = protowire.AppendBytes(unknown, mb)
	d.ProtoReflect().SetUnknown(unknown)
	res := []*rlsconf.RateLimitConfig{{Name: "a", Domain: "a", Descriptors: []*rlsconf.RateLimitDescriptor{
		d,
		{Key: "weekly", RateLimit: policy(rlsconf.RateLimitUnit(7), 7)},
		{Key: "yearly", RateLimit: policy(rlsconf.RateLimitUnit(6), 365)},
	}}}
	// Through the wire, as the xDS client receives it.
	b, err := proto.Marshal(res[0])
	if err != nil {
		t.Fatal(err)
	}
	var got rlsconf.RateLimitConfig
	if err := proto.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	files, err := ProtoFiles([]*rlsconf.RateLimitConfig{&got})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse(files, Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := cfg.Match("a", []Entry{{"tenant", "t1"}})
	if m.Outcome != Limited || !m.Limits[0].QuotaMode || m.Limits[0].Unit != Month || m.Metadata["team"] != "payments" {
		t.Errorf("matched %+v (limit %+v), want quota_mode, a monthly limit and the metadata", m, m.Limits[0])
	}
	for key, unit := range map[string]Unit{"weekly": Week, "yearly": Year} {
		if m := cfg.Match("a", []Entry{{key, "x"}}); m.Outcome != Limited || m.Limits[0].Unit != unit {
			t.Errorf("%s matched %+v, want unit %v", key, m, unit)
		}
	}
}

// TestProtoFilesRefusals: what a file would be refused for, a resource
// is refused for, named by its file; so is what the proto cannot carry.
func TestProtoFilesRefusals(t *testing.T) {
	unknownField := &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1}
	unknownField.ProtoReflect().SetUnknown(protowire.AppendVarint(protowire.AppendTag(nil, 42, protowire.VarintType), 1))
	for _, tc := range []struct {
		name string
		res  *rlsconf.RateLimitConfig
		want string // in the error of ProtoFiles, or else of Parse
	}{
		{"no unit", &rlsconf.RateLimitConfig{Name: "r", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{RequestsPerUnit: 5}}}}, "r.yaml: d.k: a rate limit needs a unit"},
		{"unknown unit", &rlsconf.RateLimitConfig{Name: "r", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "k", RateLimit: policy(rlsconf.RateLimitUnit(9), 5)}}}, `invalid rate limit unit "9"`},
		{"duplicate", &rlsconf.RateLimitConfig{Name: "r", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "k", RateLimit: policy(1, 5)}, {Key: "k", RateLimit: policy(1, 6)}}}, "duplicate descriptor"},
		{"no domain", &rlsconf.RateLimitConfig{Name: "r"}, "r.yaml: domain is empty or missing"},
		{"empty key", &rlsconf.RateLimitConfig{Name: "r", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{{Value: "v"}}}, "empty key"},
		{"unit on unlimited", &rlsconf.RateLimitConfig{Name: "r", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "k", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true, Unit: 1}}}}, "unit must not be set on an unlimited limit"},
		{"unknown field", &rlsconf.RateLimitConfig{Name: "r", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
			{Key: "k", RateLimit: unknownField}}}, "field number 42 of a RateLimitPolicy is not known"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := ProtoFiles([]*rlsconf.RateLimitConfig{tc.res})
			if err == nil {
				_, err = Parse(files, Options{})
			}
			if err == nil || !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want ErrInvalidConfig with %q", err, tc.want)
			}
		})
	}
}

// TestProtoFilesOneDomainTwice: two resources of one domain are two
// files of one domain, refused unless MergeDomains, as files are.
func TestProtoFilesOneDomainTwice(t *testing.T) {
	res := []*rlsconf.RateLimitConfig{
		{Name: "a", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "x", RateLimit: policy(1, 1)}}},
		{Name: "b", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "y", RateLimit: policy(1, 1)}}},
	}
	files, err := ProtoFiles(res)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Parse(files, Options{}); err == nil || !strings.Contains(err.Error(), `domain "d" is also defined in a.yaml`) {
		t.Errorf("error %v, want the domain refused in b.yaml", err)
	}
	if cfg, err := Parse(files, Options{MergeDomains: true}); err != nil || len(cfg.Limits()) != 2 {
		t.Errorf("merged: %v, %v", cfg, err)
	}
}

func TestProtoFileNames(t *testing.T) {
	res := []*rlsconf.RateLimitConfig{
		{Name: "a/b", Domain: "1"}, {Name: "a_b", Domain: "2"}, {Name: "", Domain: "3"}, {Name: "..hidden", Domain: "4"},
		{Name: strings.Repeat("x", 300), Domain: "5"},
	}
	files, err := ProtoFiles(res)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a_b.yaml", "a_b-2.yaml", "resource-2.yaml", "hidden.yaml", strings.Repeat("x", 200) + ".yaml"}
	for _, name := range want {
		if _, ok := files[name]; !ok {
			t.Errorf("no file %s among %v", name, keys(files))
		}
	}
	cfg, err := Parse(files, Options{})
	if err != nil || len(cfg.Domains()) != 5 {
		t.Errorf("every resource read: %v, %v", cfg.Domains(), err)
	}
}

func keys(m map[string][]byte) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// FuzzProtoFiles: any resource the wire can carry becomes files that
// Parse either reads or refuses with ErrInvalidConfig; nothing panics.
func FuzzProtoFiles(f *testing.F) {
	seed, _ := proto.Marshal(&rlsconf.RateLimitConfig{Name: "n", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "k", Value: "v*", RateLimit: policy(2, 3), Descriptors: []*rlsconf.RateLimitDescriptor{{Key: "j", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}}}}}})
	f.Add(seed)
	f.Fuzz(func(t *testing.T, b []byte) {
		var res rlsconf.RateLimitConfig
		if proto.Unmarshal(b, &res) != nil {
			return
		}
		files, err := ProtoFiles([]*rlsconf.RateLimitConfig{&res})
		if err == nil {
			_, err = Parse(files, Options{})
		}
		if err != nil && !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("an error that is not ErrInvalidConfig: %v", err)
		}
	})
}
