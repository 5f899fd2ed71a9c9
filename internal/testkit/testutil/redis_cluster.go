// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/xdplimit/xdplimit/internal/command"
)

// RedisClusterConfig describes a Redis Cluster of masters without
// replicas, all on one address in one namespace, on consecutive ports.
type RedisClusterConfig struct {
	// IP is the address every node listens on; nodes announce it, so
	// clients that reach it reach every shard.
	IP netip.Addr
	// FirstPort is the first node's port (default 7000); node i uses
	// FirstPort+i, and Redis adds 10000 for the cluster bus.
	FirstPort uint16
	// Shards is the number of masters (default 3, the minimum Redis
	// accepts).
	Shards   int
	Password string
	// Timeout bounds cluster creation and every wait for cluster_state:ok
	// (default 30 s).
	Timeout time.Duration
}

// RedisCluster is a running cluster; its servers stop in tb.Cleanup.
type RedisCluster struct {
	Shards []*RedisServer
	ns     *Netns
	cfg    RedisClusterConfig
}

// StartRedisCluster starts the shards, joins them with `redis-cli --cluster
// create` (run inside the namespace, bounded by the timeout) and waits until
// every node reports cluster_state:ok.
func StartRedisCluster(tb testing.TB, ns *Netns, cfg RedisClusterConfig) *RedisCluster {
	tb.Helper()
	RequireRedis(tb)
	if cfg.FirstPort == 0 {
		cfg.FirstPort = 7000
	}
	if cfg.Shards == 0 {
		cfg.Shards = 3
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	c := &RedisCluster{ns: ns, cfg: cfg}
	args := []string{"--cluster", "create"}
	for i := range cfg.Shards {
		s := StartRedis(tb, ns, RedisConfig{
			Addr:     netip.AddrPortFrom(cfg.IP, cfg.FirstPort+uint16(i)),
			Password: cfg.Password,
			Cluster:  true,
		})
		c.Shards = append(c.Shards, s)
		args = append(args, s.Addr())
	}
	args = append(args, "--cluster-yes")
	if cfg.Password != "" {
		args = append(args, "-a", cfg.Password, "--no-auth-warning")
	}
	var out []byte
	err := ns.Do(func() error {
		var err error
		out, err = command.Run(cfg.Timeout, "redis-cli", args...)
		return err
	})
	if err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitOK(tb)
	return c
}

// Addrs lists the nodes' "ip:port", the seeds for a ClusterClient.
func (c *RedisCluster) Addrs() []string {
	addrs := make([]string, len(c.Shards))
	for i, s := range c.Shards {
		addrs[i] = s.Addr()
	}
	return addrs
}

// WaitOK waits until every node reports cluster_state:ok: after creation,
// every slot is assigned and the nodes have agreed through the cluster bus;
// after a shard restarts, the others have seen it back.
func (c *RedisCluster) WaitOK(tb testing.TB) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	for _, s := range c.Shards {
		cl := s.Client()
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") {
				break
			}
			select {
			case <-ctx.Done():
				cl.Close()
				tb.Fatalf("cluster node %s not ok after %v: %s", s.Addr(), c.cfg.Timeout, fmt.Sprint(info, err))
			case <-time.After(50 * time.Millisecond):
			}
		}
		cl.Close()
	}
}

// ClientIn returns a ClusterClient whose connections are made from ns,
// failing fast like RedisServer.ClientIn.
func (c *RedisCluster) ClientIn(ns *Netns) *redis.ClusterClient {
	return redis.NewClusterClient(FastFailOptions(ns, c.cfg.Password, c.Addrs()...).Cluster())
}
