package rlmatch

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// ProtoFiles turns RateLimitConfig resources, as an xDS server sends them
// to envoyproxy/ratelimit (CONFIG_TYPE=GRPC_XDS_SOTW), into files of
// rlconfig's format, which [Parse] reads with the same validation as any
// other. Package internal/xds states what a resource carries and how its
// file is named; a field the proto does not define is refused, with
// [ErrInvalidConfig].
func ProtoFiles(resources []*rlsconf.RateLimitConfig) (map[string][]byte, error) {
	files := make(map[string][]byte, len(resources))
	var errs []error
	for i, res := range resources {
		name := protoFileName(res.GetName(), i, files)
		c := protoConverter{name: name}
		raw := c.resource(res)
		data, err := yaml.Marshal(raw)
		if err != nil {
			c.problem("", "cannot be written as YAML: %v", err)
		}
		errs = append(errs, c.errs...)
		files[name] = data
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return files, nil
}

// protoFileName names the file of resource i, unique among files.
func protoFileName(resource string, i int, files map[string][]byte) string {
	b := []byte(resource)
	for j, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			b[j] = '_'
		}
	}
	base := strings.TrimLeft(string(b[:min(len(b), 200)]), ".") // a dot file is not read
	if base == "" {
		base = "resource-" + strconv.Itoa(i)
	}
	name := base + ".yaml"
	for n := 2; files[name] != nil; n++ {
		name = base + "-" + strconv.Itoa(n) + ".yaml"
	}
	return name
}

// protoConverter builds the raw YAML structures of one resource and
// collects the fields it cannot carry.
type protoConverter struct {
	name string // the resource's file
	errs []error
}

func (c *protoConverter) problem(path, format string, args ...any) {
	where := c.name
	if path != "" {
		where += ": " + path
	}
	c.errs = append(c.errs, fmt.Errorf("%w: %s: %s", ErrInvalidConfig, where, fmt.Sprintf(format, args...)))
}

func (c *protoConverter) resource(res *rlsconf.RateLimitConfig) rawFile {
	c.unknown(res.GetDomain(), res, nil)
	return rawFile{Domain: res.GetDomain(), Descriptors: c.descriptors(res.GetDomain(), res.GetDescriptors())}
}

func (c *protoConverter) descriptors(parent string, ds []*rlsconf.RateLimitDescriptor) []rawDescriptor {
	if len(ds) == 0 {
		return nil
	}
	out := make([]rawDescriptor, len(ds))
	for i, d := range ds {
		path := fmt.Sprintf("%s.descriptors[%d]", parent, i)
		rd := rawDescriptor{
			Key:            d.GetKey(),
			Value:          d.GetValue(),
			ShadowMode:     d.GetShadowMode(),
			DetailedMetric: d.GetDetailedMetric(),
		}
		// quota_mode (7) and metadata (8) came after the proto compiled in.
		c.unknown(path, d, func(num protowire.Number, typ protowire.Type, v []byte) bool {
			switch {
			case num == 7 && typ == protowire.VarintType:
				n, _ := protowire.ConsumeVarint(v)
				rd.QuotaMode = n != 0
				return true
			case num == 8 && typ == protowire.BytesType:
				b, _ := protowire.ConsumeBytes(v)
				var s structpb.Struct
				if err := proto.Unmarshal(b, &s); err != nil {
					c.problem(path, "metadata is not a google.protobuf.Struct: %v", err)
				} else {
					rd.Metadata = s.AsMap()
				}
				return true
			}
			return false
		})
		if p := d.GetRateLimit(); p != nil {
			rd.RateLimit = c.limit(path, p)
		}
		rd.Descriptors = c.descriptors(path, d.GetDescriptors())
		out[i] = rd
	}
	return out
}

func (c *protoConverter) limit(path string, p *rlsconf.RateLimitPolicy) *rawLimit {
	c.unknown(path+".rate_limit", p, nil)
	l := &rawLimit{Name: p.GetName(), Unlimited: p.GetUnlimited()}
	if u := p.GetUnit(); u != rlsconf.RateLimitUnit_UNKNOWN {
		// The proto numbers its units as RLS v3 does, and so as Unit;
		// the newer proto adds WEEK, MONTH and YEAR with those numbers.
		l.Unit = unitNames[Unit(u)]
		if l.Unit == "" {
			l.Unit = strconv.Itoa(int(u)) // refused by Parse as an unknown unit
		}
	}
	if !l.Unlimited {
		n := requestsPerUnit(p.GetRequestsPerUnit())
		l.RequestsPerUnit = &n
	}
	for j, r := range p.GetReplaces() {
		c.unknown(fmt.Sprintf("%s.rate_limit.replaces[%d]", path, j), r, nil)
		l.Replaces = append(l.Replaces, rawReplace{Name: r.GetName()})
	}
	return l
}

// unknown reports every field of m that the compiled proto does not
// define, except those that known reads.
func (c *protoConverter) unknown(path string, msg proto.Message, known func(protowire.Number, protowire.Type, []byte) bool) {
	b := msg.ProtoReflect().GetUnknown()
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			c.problem(path, "unreadable unknown fields: %v", protowire.ParseError(n))
			return
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			c.problem(path, "unreadable unknown fields: %v", protowire.ParseError(m))
			return
		}
		if known == nil || !known(num, typ, b[n:n+m]) {
			c.problem(path, "field number %d of a %s is not known to floodgate", num, msg.ProtoReflect().Descriptor().Name())
		}
		b = b[n+m:]
	}
}
