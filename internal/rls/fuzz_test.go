package rls_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	commonv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/enforce"
	"github.com/floodgate-rl/floodgate/internal/rls"
	"github.com/floodgate-rl/floodgate/memstore"
)

// FuzzShouldRateLimit sends requests built from arbitrary domains,
// entries and hits_addends to a Server on the feature configuration (in
// memory, no network): it must answer OK or OVER_LIMIT with one status
// per descriptor, or InvalidArgument, and never panic.
func FuzzShouldRateLimit(f *testing.F) {
	dir := f.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "feat.yaml"), []byte(featureConfig), 0o644); err != nil {
		f.Fatal(err)
	}
	store := memstore.New(memstore.Options{})
	defer store.Close()
	lim, err := floodgate.New(store, floodgate.Options{})
	if err != nil {
		f.Fatal(err)
	}
	enf, err := enforce.New(enforce.Options{Limiter: lim})
	if err != nil {
		f.Fatal(err)
	}
	defer enf.Close()
	srv, err := rls.New(rls.Options{Enforcer: enf, ConfigDir: dir})
	if err != nil {
		f.Fatal(err)
	}
	defer srv.Close()

	f.Add("feat", "plain=a;path=api/x", uint32(0), int64(-1))
	f.Add("feat", "nested=vip,user=u;nested=vip,user=u", uint32(2), int64(0))
	f.Add("feat", "multi=x;shadow=y;blocked=z", uint32(0), int64(3))
	f.Add("feat", "generic=g;special=s", uint32(1), int64(1))
	f.Add("", "plain=a", uint32(0), int64(-1))
	f.Add("feat", ";=", uint32(0), int64(-1))
	f.Add("feat", "plain=a", uint32(4_000_000_000), int64(9_000_000_000_000_000_000))
	f.Add("\xffB", "0", uint32(45), int64(-1)) // the codec's refusal mark, which no decoded request has
	f.Fuzz(func(t *testing.T, domain, spec string, addend uint32, descAddend int64) {
		if !utf8.ValidString(domain) {
			// gRPC's proto3 decoding and /json's refuse such a domain, so
			// no request has one: budgetCodec marks the requests it
			// refused with a domain that starts with "\xff" (refusal).
			return
		}
		r := &rlsv3.RateLimitRequest{Domain: domain, HitsAddend: addend}
		for _, d := range strings.Split(spec, ";") {
			rd := &commonv3.RateLimitDescriptor{}
			if d != "" {
				for _, kv := range strings.Split(d, ",") {
					k, v, _ := strings.Cut(kv, "=")
					rd.Entries = append(rd.Entries, &commonv3.RateLimitDescriptor_Entry{Key: k, Value: v})
				}
			}
			if descAddend >= 0 {
				rd.HitsAddend = wrapperspb.UInt64(uint64(descAddend))
			}
			r.Descriptors = append(r.Descriptors, rd)
		}
		resp, err := srv.ShouldRateLimit(context.Background(), r)
		if err != nil {
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("%v: %v, want an answer or InvalidArgument", r, err)
			}
			return
		}
		if len(resp.GetStatuses()) != len(r.Descriptors) {
			t.Fatalf("%d statuses for %d descriptors", len(resp.GetStatuses()), len(r.Descriptors))
		}
		overall := rlsv3.RateLimitResponse_OK
		for _, st := range resp.GetStatuses() {
			if st.GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
				overall = rlsv3.RateLimitResponse_OVER_LIMIT
			}
		}
		if resp.GetOverallCode() != overall {
			t.Fatalf("overall_code %v with statuses %v", resp.GetOverallCode(), resp.GetStatuses())
		}
	})
}
