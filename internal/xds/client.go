package xds

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/prometheus/client_golang/prometheus"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate-rl/floodgate/internal/rlmatch"
	"github.com/floodgate-rl/floodgate/rlconfig"
)

// TypeURL is the type of the resources a Client subscribes to.
const TypeURL = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig"

// ErrInvalidOptions is wrapped by the errors of [New].
var ErrInvalidOptions = errors.New("xds: invalid options")

// nackLogInterval is the least time between two log lines about rejected
// configurations (the package doc's 30s).
const nackLogInterval = 30 * time.Second

// maxErrorDetail bounds the reason a NACK carries: the problems of a
// large configuration are listed whole in the log, cut in the NACK.
const maxErrorDetail = 16 << 10

// Options configures a [Client]. Server and Apply are required; every
// other field has a default.
type Options struct {
	// Server is the xDS server's address, host:port, as gRPC resolves it
	// (envoyproxy/ratelimit's CONFIG_GRPC_XDS_SERVER_URL).
	Server string
	// NodeID is the node the server keys its snapshots by. Empty means
	// "default", as upstream.
	NodeID string
	// NodeMetadata is sent as the node's metadata, each value a string.
	NodeMetadata map[string]string
	// Headers are sent as gRPC metadata on the stream.
	Headers map[string]string
	// TLS, when set, gives the TLS configuration of each connection
	// attempt; it is called before each one, so that a rotated
	// certificate or CA is taken up at the next reconnection. Nil means
	// plaintext.
	TLS func() (*tls.Config, error)
	// MaxMessageSize bounds a response's size. Zero means gRPC's default
	// of 4 MiB.
	MaxMessageSize int
	// Backoff paces the reconnections. The zero value is upstream's
	// defaults: 10s, doubling to 60s, each randomized by ±50%.
	Backoff Backoff
	// ConfigOptions are the parse options of every configuration.
	ConfigOptions rlconfig.Options
	// Apply puts a validated configuration in force. It is called from
	// the Client's goroutine, one configuration at a time, before the
	// ACK; an error rejects the configuration (NACK with the error as the
	// reason), and the one in force must then stay.
	Apply func(Update) error
	// Logger receives the connection, ACK and NACK logs; nil discards
	// them.
	Logger *slog.Logger
	// Registerer receives the metrics; nil keeps them unregistered.
	Registerer prometheus.Registerer
}

// Update is a validated configuration for [Options].Apply.
type Update struct {
	// Version is the server's version_info.
	Version string
	// Config is the configuration, as Parse read Files.
	Config *rlconfig.Config
	// Files are the resources as envoyproxy/ratelimit YAML files, one
	// per resource, named after it (cut to letters, digits, ".", "-" and
	// "_", made unique, ending in .yaml); [rlconfig.Parse] reads them as
	// Config.
	Files map[string][]byte
}

// Backoff is the pause before each reconnection: Initial after the first
// failure, doubling with each further one up to Max, and back to Initial
// once a stream has delivered a response. With Jitter, each pause is
// multiplied by a random factor in [1-RandomFactor, 1+RandomFactor].
// Zero fields mean envoyproxy/ratelimit's defaults (XDS_CLIENT_BACKOFF_*):
// Initial 10s, Max 60s, RandomFactor 0.5; set NoJitter to turn the
// randomization off.
type Backoff struct {
	Initial, Max time.Duration
	RandomFactor float64
	NoJitter     bool
}

// delay returns the pause after attempt failures (0 for the first).
func (b Backoff) delay(attempt int, rnd func() float64) time.Duration {
	initial, maxd, f := b.Initial, b.Max, b.RandomFactor
	if initial <= 0 {
		initial = 10 * time.Second
	}
	if maxd <= 0 {
		maxd = 60 * time.Second
	}
	maxd = max(maxd, initial)
	if f <= 0 {
		f = 0.5
	}
	d := initial
	for range attempt {
		if d >= maxd/2 {
			d = maxd
			break
		}
		d *= 2
	}
	d = min(d, maxd)
	if !b.NoJitter {
		d = time.Duration(float64(d) * (1 - f + 2*f*rnd()))
	}
	return d
}

// Client holds the configuration an xDS server sends. Its methods are
// safe for concurrent use. Close it when done.
type Client struct {
	opts   Options
	logger *slog.Logger
	node   *corev3.Node
	m      metrics
	cancel context.CancelFunc
	done   chan struct{}
	loaded chan struct{}
	once   sync.Once

	inForce atomic.Pointer[accepted]

	// Used by the Client's goroutine only.
	rejected rejection
	nacks    nackLog
}

// accepted is the configuration in force.
type accepted struct {
	version string
	hash    [32]byte
	cfg     *rlconfig.Config
}

// rejection is the last configuration rejected, and how often in a row.
type rejection struct {
	hash  [32]byte
	err   error
	times int
}

type metrics struct {
	connected  prometheus.Gauge
	info       *prometheus.GaugeVec
	acks, nack prometheus.Counter
}

// New checks opts and starts the Client: it connects and subscribes in
// the background, and calls Apply with each valid configuration.
func New(opts Options) (*Client, error) {
	var errs []error
	if opts.Server == "" {
		errs = append(errs, fmt.Errorf("%w: Server is required", ErrInvalidOptions))
	}
	if opts.Apply == nil {
		errs = append(errs, fmt.Errorf("%w: Apply is required", ErrInvalidOptions))
	}
	if opts.MaxMessageSize < 0 {
		errs = append(errs, fmt.Errorf("%w: MaxMessageSize %d is negative", ErrInvalidOptions, opts.MaxMessageSize))
	}
	if b := opts.Backoff; b.Initial < 0 || b.Max < 0 || b.RandomFactor < 0 || b.RandomFactor >= 1 {
		errs = append(errs, fmt.Errorf("%w: Backoff %+v: the intervals must not be negative, and RandomFactor must be at least 0 and below 1", ErrInvalidOptions, b))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if opts.NodeID == "" {
		opts.NodeID = "default"
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	md := map[string]*structpb.Value{}
	for k, v := range opts.NodeMetadata {
		md[k] = structpb.NewStringValue(v)
	}
	c := &Client{
		opts:   opts,
		logger: logger,
		node:   &corev3.Node{Id: opts.NodeID, Metadata: &structpb.Struct{Fields: md}, UserAgentName: "floodgate"},
		done:   make(chan struct{}),
		loaded: make(chan struct{}),
		m: metrics{
			connected: prometheus.NewGauge(prometheus.GaugeOpts{Name: "floodgate_xds_connected",
				Help: "1 while a stream to the xDS server is open, else 0."}),
			info: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "floodgate_xds_config_info",
				Help: "1, labelled with the version (the xDS server's version_info) of the rate-limit configuration in force; no series before the first."}, []string{"version"}),
			acks: prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_xds_acks_total",
				Help: "xDS responses accepted (ACK), the ones that changed nothing included."}),
			nack: prometheus.NewCounter(prometheus.CounterOpts{Name: "floodgate_xds_nacks_total",
				Help: "xDS responses rejected (NACK): invalid, or not put in force; the configuration in force stayed."}),
		},
	}
	c.nacks.interval = nackLogInterval
	if opts.Registerer != nil {
		for _, col := range []prometheus.Collector{c.m.connected, c.m.info, c.m.acks, c.m.nack} {
			if err := opts.Registerer.Register(col); err != nil {
				return nil, fmt.Errorf("xds: register metrics: %w", err)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	go c.run(ctx)
	return c, nil
}

// Config returns the configuration in force: the last one Apply took,
// or nil before the first.
func (c *Client) Config() *rlconfig.Config {
	if a := c.inForce.Load(); a != nil {
		return a.cfg
	}
	return nil
}

// version returns the version of the configuration in force, or "" before
// the first. Callers learn it from Update.Version and
// floodgate_xds_config_info.
func (c *Client) version() string {
	if a := c.inForce.Load(); a != nil {
		return a.version
	}
	return ""
}

// Loaded is closed once Apply has taken a first configuration.
func (c *Client) Loaded() <-chan struct{} { return c.loaded }

// Close ends the stream and waits for the Client's goroutine, so that no
// Apply runs after it returns. The configuration stays readable. Close is
// idempotent.
func (c *Client) Close() error {
	c.once.Do(func() {
		c.cancel()
		<-c.done
	})
	return nil
}

func (c *Client) run(ctx context.Context) {
	defer close(c.done)
	defer c.nacks.flush(c.logger)
	attempt := 0
	for {
		received, err := c.session(ctx)
		c.m.connected.Set(0)
		if ctx.Err() != nil {
			return
		}
		if received {
			attempt = 0
		}
		d := c.opts.Backoff.delay(attempt, rand.Float64)
		attempt++
		c.nacks.flush(c.logger)
		msg := "xDS server lost or unreachable: the rate-limit configuration in force stays; reconnecting"
		if c.inForce.Load() == nil {
			// Before the first configuration (a service started with
			// FORCE_START_WITHOUT_INITIAL_CONFIG answers Unavailable):
			// no configuration stays, none came.
			msg = "xDS server lost or unreachable: no rate-limit configuration is in force yet; reconnecting"
		}
		c.logger.Warn(msg, "server", c.opts.Server, "err", err, "retry_in", d.Round(time.Millisecond), "attempt", attempt, "version", c.version())
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// session runs one stream until it fails. It reports whether the server
// sent anything.
func (c *Client) session(ctx context.Context) (received bool, err error) {
	creds := insecure.NewCredentials()
	if c.opts.TLS != nil {
		cfg, err := c.opts.TLS()
		if err != nil {
			return false, fmt.Errorf("xds: TLS configuration: %w", err)
		}
		creds = credentials.NewTLS(cfg)
	}
	dial := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		// A server gone without closing the connection is found out by
		// the pings; a server lets a client ping every 5 minutes by
		// default.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 5 * time.Minute, Timeout: 20 * time.Second}),
	}
	if c.opts.MaxMessageSize > 0 {
		dial = append(dial, grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(c.opts.MaxMessageSize)))
	}
	conn, err := grpc.NewClient(c.opts.Server, dial...)
	if err != nil {
		return false, fmt.Errorf("xds: %w", err)
	}
	defer conn.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if len(c.opts.Headers) > 0 {
		sctx = metadata.NewOutgoingContext(sctx, metadata.New(c.opts.Headers))
	}
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(sctx)
	if err != nil {
		return false, fmt.Errorf("xds: open the stream: %w", err)
	}
	// A new stream asks for what the Client holds; the server answers
	// with its current snapshot.
	if err := stream.Send(&discovery.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL, VersionInfo: c.version()}); err != nil {
		return false, fmt.Errorf("xds: subscribe: %w", err)
	}
	c.m.connected.Set(1)
	c.logger.Info("xDS stream open", "server", c.opts.Server, "node", c.opts.NodeID, "version", c.version())
	for {
		resp, err := stream.Recv()
		if err != nil {
			return received, fmt.Errorf("xds: receive: %w", err)
		}
		received = true
		if resp.GetTypeUrl() != TypeURL {
			// Not subscribed to: nothing to answer.
			c.logger.Debug("xDS response of another type ignored", "type_url", resp.GetTypeUrl())
			continue
		}
		req := c.handle(ctx, resp)
		if req == nil {
			return received, ctx.Err()
		}
		if err := stream.Send(req); err != nil {
			return received, fmt.Errorf("xds: answer: %w", err)
		}
	}
}

// handle validates and applies a response, and returns its ACK or NACK;
// nil when ctx ended while a NACK was held back.
func (c *Client) handle(ctx context.Context, resp *discovery.DiscoveryResponse) *discovery.DiscoveryRequest {
	hash := hashResources(resp.GetResources())
	ack := func(a *accepted) *discovery.DiscoveryRequest {
		c.inForce.Store(a)
		c.m.info.Reset()
		c.m.info.WithLabelValues(a.version).Set(1)
		c.m.acks.Inc()
		return &discovery.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL, VersionInfo: a.version, ResponseNonce: resp.GetNonce()}
	}
	if cur := c.inForce.Load(); cur != nil && cur.hash == hash {
		// What is in force, again (a new stream, or a new version of the
		// same resources): nothing to apply.
		c.rejected = rejection{}
		return ack(&accepted{version: resp.GetVersionInfo(), hash: hash, cfg: cur.cfg})
	}

	var err error
	if c.rejected.times > 0 && c.rejected.hash == hash {
		// Sent again as it was: go-control-plane's cache answers each NACK
		// with the same snapshot. Refuse it again, after a pause.
		err = c.rejected.err
		c.rejected.times++
		pause := min(100*time.Millisecond<<min(c.rejected.times-2, 7), 10*time.Second)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	} else {
		var u Update
		u, err = c.read(resp)
		if err == nil {
			if err = c.opts.Apply(u); err == nil {
				c.rejected = rejection{}
				req := ack(&accepted{version: u.Version, hash: hash, cfg: u.Config})
				c.logger.Info("rate-limit configuration from xDS in force", "version", u.Version, "domains", u.Config.Domains(),
					"limits", len((*rlmatch.Config)(u.Config).Limits()), "resources", len(u.Files), "rejected_since_the_last", c.nacks.reset())
				select {
				case <-c.loaded:
				default:
					close(c.loaded)
				}
				return req
			}
		}
		c.rejected = rejection{hash: hash, err: err, times: 1}
	}
	c.m.nack.Inc()
	c.nacks.log(c.logger, resp.GetVersionInfo(), c.version(), err)
	detail := err.Error()
	if len(detail) > maxErrorDetail {
		detail = fmt.Sprintf("%s... (%d more bytes)", detail[:maxErrorDetail], len(detail)-maxErrorDetail)
	}
	return &discovery.DiscoveryRequest{Node: c.node, TypeUrl: TypeURL, VersionInfo: c.version(), ResponseNonce: resp.GetNonce(),
		ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: detail}}
}

// read decodes and validates a response whole.
func (c *Client) read(resp *discovery.DiscoveryResponse) (Update, error) {
	res := make([]*rlsconf.RateLimitConfig, len(resp.GetResources()))
	for i, a := range resp.GetResources() {
		if a.GetTypeUrl() != TypeURL {
			return Update{}, fmt.Errorf("%w: resource %d is a %s, not a RateLimitConfig", rlconfig.ErrInvalidConfig, i, a.GetTypeUrl())
		}
		res[i] = &rlsconf.RateLimitConfig{}
		if err := anypb.UnmarshalTo(a, res[i], proto.UnmarshalOptions{}); err != nil {
			return Update{}, fmt.Errorf("%w: resource %d: %v", rlconfig.ErrInvalidConfig, i, err)
		}
	}
	files, err := rlmatch.ProtoFiles(res)
	if err != nil {
		return Update{}, err
	}
	cfg, err := rlconfig.Parse(files, c.opts.ConfigOptions)
	if err != nil {
		return Update{}, err
	}
	return Update{Version: resp.GetVersionInfo(), Config: cfg, Files: files}, nil
}

// hashResources identifies a response's resources, in order.
func hashResources(rs []*anypb.Any) [32]byte {
	h := sha256.New()
	var n [8]byte
	for _, r := range rs {
		for _, b := range [][]byte{[]byte(r.GetTypeUrl()), r.GetValue()} {
			binary.BigEndian.PutUint64(n[:], uint64(len(b)))
			h.Write(n[:])
			h.Write(b)
		}
	}
	var sum [32]byte
	h.Sum(sum[:0])
	return sum
}

// nackLog writes at most one line per interval about rejected
// configurations: the first at once, then the latest at the next
// rejection past the interval, saying how many it stands for. A change
// of reason is written at once, after the rejections held with the old
// one. Used by the Client's goroutine only.
type nackLog struct {
	interval time.Duration
	last     time.Time // when the last line was written
	reason   string    // the reason it gave
	held     int       // rejections since, not written
	heldArgs []any     // the latest of them
	total    int       // rejections since the last reset
}

func (n *nackLog) log(logger *slog.Logger, version, inForce string, err error) {
	args := []any{"version", version, "version_in_force", inForce, "err", err}
	n.total++
	if !n.last.IsZero() && err.Error() != n.reason {
		n.flush(logger) // the held ones had the old reason
	}
	now := time.Now()
	if n.last.IsZero() || now.Sub(n.last) >= n.interval || err.Error() != n.reason {
		logger.Error("rate-limit configuration from xDS rejected (NACK); the one in force stays", append(args, "rejections_not_logged", n.held)...)
		n.last, n.reason, n.held, n.heldArgs = now, err.Error(), 0, nil
		return
	}
	n.held++
	n.heldArgs = args
}

// flush writes the held rejections, if any.
func (n *nackLog) flush(logger *slog.Logger) {
	if n.held > 0 {
		logger.Error("rate-limit configuration from xDS rejected (NACK); the one in force stays",
			append(n.heldArgs, "rejections_not_logged", n.held-1)...)
		n.last, n.held, n.heldArgs = time.Now(), 0, nil
	}
}

// reset forgets the rejections and returns how many there were since
// the last reset.
func (n *nackLog) reset() int {
	total := n.total
	*n = nackLog{interval: n.interval}
	return total
}
