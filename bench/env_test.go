// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
)

// TestEnvVethPair: the pair the benchmarks use comes up in two namespaces
// of the run's prefix, and closing the env deletes both.
func TestEnvVethPair(t *testing.T) {
	testutil.RequireRoot(t)
	e := newEnv(context.Background(), io.Discard)
	defer e.close() // on failure; a second close does nothing
	v, err := e.vethPair("xbt0", "xbt1", 99)
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{v.NS.Name(), v.PeerNS.Name()} {
		if !strings.HasPrefix(ns, nsPrefix) {
			t.Errorf("namespace %s lacks prefix %s", ns, nsPrefix)
		}
	}
	if v.PeerAddr.String() != "198.18.99.2" || v.Queues != 2 {
		t.Errorf("peer address %s, %d queues", v.PeerAddr, v.Queues)
	}
	e.close()
	for _, path := range []string{v.NS.Path(), v.PeerNS.Path()} {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after close (err %v)", path, err)
		}
	}
}

// TestTryRecoversPanic: one broken measurement becomes an error.
func TestTryRecoversPanic(t *testing.T) {
	err := try(func() error { panic("boom") })
	if err == nil || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("try returned %v", err)
	}
}
