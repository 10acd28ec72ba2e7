// Command xdsconfig serves a directory of envoyproxy/ratelimit YAML
// configuration files over xDS, as Envoy Gateway feeds its rate-limit
// service: each file becomes one ratelimit.config.ratelimit.v3.RateLimitConfig
// resource (named after the file), and go-control-plane's
// state-of-the-world server serves them over ADS from a snapshot cache
// keyed by node id, until the process is killed.
//
//	xdsconfig -dir bench/compat/ratelimit/config -addr 127.0.0.1:18000 -node compat
//
// A file is converted YAML → generic map → JSON → protojson, with the
// unit names upper-cased as the proto's enum spells them. A field the
// proto compiled in does not define (share_threshold, for one) cannot
// travel over xDS: it is left out of the resource and reported on
// stderr, one line per field, each starting with "dropped:", so that a
// comparison of the services fed by this server can list the difference
// instead of missing it. A value the proto cannot hold fails the start.
//
// scripts/compat.sh runs this with COMPAT_XDS=1.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "xdsconfig:", err)
		os.Exit(2)
	}
}

func run(args []string, log io.Writer) error {
	fs := flag.NewFlagSet("xdsconfig", flag.ContinueOnError)
	dir := fs.String("dir", "", "the directory of envoyproxy/ratelimit YAML files (*.yaml, *.yml at its top)")
	addr := fs.String("addr", "127.0.0.1:18000", "the address to serve xDS on")
	node := fs.String("node", "default", "the node id the snapshot is for (CONFIG_GRPC_XDS_NODE_ID)")
	version := fs.String("version", "1", "the snapshot's version")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return fmt.Errorf("-dir is required")
	}
	res, dropped, err := LoadDir(*dir)
	if err != nil {
		return err
	}
	for _, d := range dropped {
		fmt.Fprintln(log, "dropped:", d)
	}
	rs := make([]types.Resource, len(res))
	for i, r := range res {
		rs[i] = r
	}
	snap, err := cache.NewSnapshot(*version, map[resource.Type][]types.Resource{resource.RateLimitConfigType: rs})
	if err != nil {
		return err
	}
	c := cache.NewSnapshotCache(false, cache.IDHash{}, nil)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := c.SetSnapshot(ctx, *node, snap); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	g := grpc.NewServer()
	discovery.RegisterAggregatedDiscoveryServiceServer(g, server.NewServer(ctx, c, server.CallbackFuncs{}))
	fmt.Fprintf(log, "serving %d RateLimitConfig resources from %s on %s for node %q, version %s\n", len(res), *dir, lis.Addr(), *node, *version)
	go func() {
		<-ctx.Done()
		g.Stop()
	}()
	return g.Serve(lis)
}

// LoadDir converts the *.yaml and *.yml files at the top of dir, in name
// order, and returns the resources and the fields dropped from them.
func LoadDir(dir string) ([]*rlsconf.RateLimitConfig, []string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	var names []string
	for _, e := range entries {
		if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var res []*rlsconf.RateLimitConfig
	var dropped []string
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, nil, err
		}
		r, d, err := Convert(strings.TrimSuffix(name, filepath.Ext(name)), data)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, f := range d {
			dropped = append(dropped, name+": "+f)
		}
		res = append(res, r)
	}
	return res, dropped, nil
}

// Convert turns one envoyproxy/ratelimit YAML file into a resource named
// name, and lists the fields it had to leave out, by path.
func Convert(name string, data []byte) (*rlsconf.RateLimitConfig, []string, error) {
	var raw map[string]any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, nil, err
	}
	if raw == nil {
		raw = map[string]any{}
	}
	res := &rlsconf.RateLimitConfig{}
	var dropped []string
	if err := fit(raw, res.ProtoReflect().Descriptor(), "", &dropped); err != nil {
		return nil, nil, err
	}
	raw["name"] = name
	js, err := json.Marshal(raw)
	if err != nil {
		return nil, nil, err
	}
	if err := protojson.Unmarshal(js, res); err != nil {
		return nil, nil, err
	}
	return res, dropped, nil
}

// fit shapes m for protojson as message md: it removes, and lists in
// dropped, the keys md has no field for, upper-cases enum values, and
// goes down into nested messages.
func fit(m map[string]any, md protoreflect.MessageDescriptor, path string, dropped *[]string) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p := k
		if path != "" {
			p = path + "." + k
		}
		fd := md.Fields().ByName(protoreflect.Name(k))
		if fd == nil {
			fd = md.Fields().ByJSONName(k)
		}
		if fd == nil {
			*dropped = append(*dropped, fmt.Sprintf("%s: %v (no field in %s)", p, m[k], md.FullName()))
			delete(m, k)
			continue
		}
		v := m[k]
		if v == nil {
			delete(m, k)
			continue
		}
		if fd.IsList() {
			list, ok := v.([]any)
			if !ok {
				return fmt.Errorf("%s: want a list, have %T", p, v)
			}
			for i := range list {
				nv, err := fitValue(list[i], fd, fmt.Sprintf("%s[%d]", p, i), dropped)
				if err != nil {
					return err
				}
				list[i] = nv
			}
			continue
		}
		nv, err := fitValue(v, fd, p, dropped)
		if err != nil {
			return err
		}
		m[k] = nv
	}
	return nil
}

func fitValue(v any, fd protoreflect.FieldDescriptor, path string, dropped *[]string) (any, error) {
	switch fd.Kind() {
	case protoreflect.MessageKind:
		sub, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: want a mapping, have %T", path, v)
		}
		return sub, fit(sub, fd.Message(), path, dropped)
	case protoreflect.EnumKind:
		if s, ok := v.(string); ok {
			return strings.ToUpper(s), nil
		}
	}
	return v, nil
}
