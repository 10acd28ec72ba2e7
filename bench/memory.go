package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/floodgate-rl/floodgate"
	"github.com/floodgate-rl/floodgate/redisstore"
	"github.com/go-redis/redis_rate/v10"
	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	ulule "github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

// memoryLimits are the limits of the memory table.
var memoryLimits = []int64{10, 100, 1000}

// memoryTable fills one key per algorithm and limit to its limit (one
// hour windows, so nothing leaves) and prints MEMORY USAGE of each key, key
// name included: floodgate's keys with the default prefix "fg:", a rule
// named "login" and a 12-character client key, and the peers' keys for the
// same client key.
func memoryTable(ctx context.Context, addr string, out io.Writer) error {
	raw, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		return err
	}
	defer raw.Close()
	usage := func(key string) (int64, error) {
		return raw.Do(ctx, raw.B().MemoryUsage().Key(key).Samples(0).Build()).AsInt64()
	}
	newKey := func() string {
		var b [6]byte
		_, _ = rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}
	s, err := redisstore.New(ctx, redisstore.Options{URL: "redis://" + addr})
	if err != nil {
		return err
	}
	defer s.Close()
	l, err := floodgate.New(s, floodgate.Options{Timeout: 5 * time.Second})
	if err != nil {
		return err
	}
	gr := goredis.NewClient(&goredis.Options{Addr: addr})
	defer gr.Close()

	type row struct {
		name  string
		bytes []int64
	}
	var rows []row
	for _, alg := range []floodgate.Algorithm{floodgate.SlidingWindow, floodgate.TokenBucket, floodgate.FixedWindow, floodgate.SlidingWindowCounter} {
		rw := row{name: "floodgate " + alg.String()}
		for _, limit := range memoryLimits {
			r, err := floodgate.NewRule("login", limit, time.Hour, alg)
			if err != nil {
				return err
			}
			key := newKey()
			for range limit {
				if d, err := l.Allow(ctx, r, key); err != nil || !d.Allowed {
					return fmt.Errorf("filling %v key: %+v, %w", alg, d, err)
				}
			}
			suffix := map[floodgate.Algorithm]string{floodgate.SlidingWindow: "w", floodgate.TokenBucket: "t", floodgate.FixedWindow: "f", floodgate.SlidingWindowCounter: "c"}[alg]
			// The key layout of redisstore's package documentation.
			n, err := usage("fg:{login:" + key + "}:" + suffix + ":" + r.Window.String())
			if err != nil {
				return err
			}
			rw.bytes = append(rw.bytes, n)
		}
		rows = append(rows, rw)
	}
	rate := redis_rate.NewLimiter(gr)
	rw := row{name: "go-redis/redis_rate (GCRA)"}
	for _, limit := range memoryLimits {
		key := newKey()
		for range limit {
			if _, err := rate.Allow(ctx, key, redis_rate.Limit{Rate: int(limit), Burst: int(limit), Period: time.Hour}); err != nil {
				return err
			}
		}
		n, err := usage("rate:" + key)
		if err != nil {
			return err
		}
		rw.bytes = append(rw.bytes, n)
	}
	rows = append(rows, rw)
	us, err := ulredis.NewStoreWithOptions(gr, ulule.StoreOptions{Prefix: "limiter"})
	if err != nil {
		return err
	}
	rw = row{name: "ulule/limiter redis (fixed window)"}
	for _, limit := range memoryLimits {
		key := newKey()
		ul := ulule.New(us, ulule.Rate{Period: time.Hour, Limit: limit})
		for range limit {
			if _, err := ul.Get(ctx, key); err != nil {
				return err
			}
		}
		n, err := usage("limiter:" + key)
		if err != nil {
			return err
		}
		rw.bytes = append(rw.bytes, n)
	}
	rows = append(rows, rw)

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "Redis MEMORY USAGE of one full key (bytes)\t")
	for _, limit := range memoryLimits {
		fmt.Fprintf(tw, "limit %d\t", limit)
	}
	fmt.Fprintln(tw)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t", r.name)
		for _, b := range r.bytes {
			fmt.Fprintf(tw, "%s\t", count(float64(b)))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}
