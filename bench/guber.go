//go:build gubernator

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	guber "github.com/gubernator-io/gubernator/v2"
	"github.com/sirupsen/logrus"
)

// gubernator v2 beside escrow (issue 37): a real cluster of three
// gubernator daemons (its own daemon code, gubernator.SpawnDaemon, in
// this process), each listening for gRPC and HTTP on its own loopback
// port and told of the other two as peers, and asked with GLOBAL
// behaviour: the instance a request reaches answers from its own copy of
// the key and sends the hits to the key's owner in the background, which
// broadcasts the key's state back to every peer.

const (
	// guberSyncWait is GlobalSyncWait, how long an owner gathers hits
	// before it broadcasts a key's state: gubernator's own default.
	guberSyncWait = 100 * time.Millisecond
	guberName     = "fgbench"
)

// guberCluster is a running cluster of gubernator daemons and a client of
// each.
type guberCluster struct {
	log     *logrus.Logger
	daemons []*guber.Daemon
	clients []guber.V1Client
}

// freeLoopbackPort returns a loopback TCP address that nothing listened
// on a moment ago.
func freeLoopbackPort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// startGubernator starts n gubernator daemons on loopback, each a peer of
// the others, and dials each.
func startGubernator(n int) (*guberCluster, error) {
	log := logrus.New()
	log.SetLevel(logrus.ErrorLevel)
	log.SetOutput(os.Stderr)
	c := &guberCluster{log: log}
	var peers []guber.PeerInfo
	for range n {
		grpcAddr, err1 := freeLoopbackPort()
		httpAddr, err2 := freeLoopbackPort()
		if err := errors.Join(err1, err2); err != nil {
			c.Close()
			return nil, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		d, err := guber.SpawnDaemon(ctx, guber.DaemonConfig{
			Logger:            log.WithField("instance", grpcAddr),
			InstanceID:        grpcAddr,
			GRPCListenAddress: grpcAddr,
			HTTPListenAddress: httpAddr,
			AdvertiseAddress:  grpcAddr,
			Behaviors:         guber.BehaviorConfig{GlobalSyncWait: guberSyncWait},
		})
		cancel()
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("gubernator daemon on %s: %w", grpcAddr, err)
		}
		c.daemons = append(c.daemons, d)
		peers = append(peers, guber.PeerInfo{GRPCAddress: grpcAddr, HTTPAddress: httpAddr})
	}
	for _, d := range c.daemons {
		d.SetPeers(peers)
	}
	for _, p := range peers {
		cl, err := guber.DialV1Server(p.GRPCAddress, nil)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("gubernator client of %s: %w", p.GRPCAddress, err)
		}
		c.clients = append(c.clients, cl)
	}
	return c, nil
}

// Close stops the daemons, each within guberCloseWait: gubernator
// v2.13.0's Daemon.Close can hang for good after GLOBAL traffic (its
// globalManager's Close waits on an interval goroutine blocked sending
// on a channel that nobody reads any more), so a daemon whose Close has
// not returned by then is left to the end of the process, idle, since
// its load has stopped.
func (c *guberCluster) Close() {
	var wg sync.WaitGroup
	for _, d := range c.daemons {
		done := make(chan struct{})
		go func() { d.Close(); close(done) }()
		wg.Go(func() {
			select {
			case <-done:
			case <-time.After(guberCloseWait):
				fmt.Fprintf(os.Stderr, "bench: gubernator daemon %s: Close did not return in %v; left to the end of the process\n", d.InstanceID, guberCloseWait)
			}
		})
	}
	wg.Wait()
	c.log.SetLevel(logrus.FatalLevel) // the other daemons' hits to a closed one fail
}

const guberCloseWait = 2 * time.Second

// guberBuilt reports that this build has gubernator (-tags gubernator).
const guberBuilt = true

// guberReplicas starts n daemons and returns a decider of each, asking
// for one hit of a key with limit per window, GLOBAL, by gubernator's
// TOKEN_BUCKET or, with leaky, its LEAKY_BUCKET, and a func that stops
// them.
func guberReplicas(n int, limit int64, window time.Duration, leaky bool) ([]guberAsk, func(), error) {
	c, err := startGubernator(n)
	if err != nil {
		return nil, nil, err
	}
	asks := make([]guberAsk, len(c.clients))
	for i, cl := range c.clients {
		asks[i] = guberDecide(cl, limit, window, leaky)
	}
	return asks, c.Close, nil
}

// guberDecide returns a decider that asks client for one hit of key with
// limit per window, GLOBAL: a TOKEN_BUCKET, or with leaky a LEAKY_BUCKET
// (its burst the limit, gubernator's default). It also reports the
// answer's reset time (Unix milliseconds): a token bucket lasts window
// from its first hit and is full again at that time.
func guberDecide(client guber.V1Client, limit int64, window time.Duration, leaky bool) guberAsk {
	alg := guber.Algorithm_TOKEN_BUCKET
	if leaky {
		alg = guber.Algorithm_LEAKY_BUCKET
	}
	return func(ctx context.Context, key string) (bool, int64, error) {
		resp, err := client.GetRateLimits(ctx, &guber.GetRateLimitsReq{Requests: []*guber.RateLimitReq{{
			Name: guberName, UniqueKey: key, Hits: 1, Limit: limit, Duration: window.Milliseconds(),
			Algorithm: alg, Behavior: guber.Behavior_GLOBAL,
		}}})
		if err != nil {
			return false, 0, err
		}
		if len(resp.Responses) != 1 {
			return false, 0, fmt.Errorf("gubernator: %d responses to one request", len(resp.Responses))
		}
		r := resp.Responses[0]
		if r.Error != "" {
			return false, 0, fmt.Errorf("gubernator: %s", r.Error)
		}
		return r.Status == guber.Status_UNDER_LIMIT, r.ResetTime, nil
	}
}
