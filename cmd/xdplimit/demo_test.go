// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/internal/netns"
	"github.com/xdplimit/xdplimit/internal/testkit/testutil"
	"github.com/xdplimit/xdplimit/loader"
)

// TestDemo runs the demo for three seconds: it floods between the two namespaces
// it creates (run it under the flood lock), must show top's table and the
// scrape, and must leave no namespace and no pins behind.
func TestDemo(t *testing.T) {
	testutil.RequireLiveFrames(t)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), testutil.MachineWait)
	defer cancel()
	// The flood lasts until top has shown a table, however long opening
	// the pins takes on a loaded machine.
	if err := runDemo(ctx, &out, 3*time.Second, 4, "127.0.0.1:0"); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	for _, want := range []string{"RULE  PASS/s", "udp-per-source", "final counters:", "xdplimit_packets_total{", "removed the demo's namespaces"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	mine := fmt.Sprintf("%s%d-", demoPrefix, os.Getpid())
	ents, _ := os.ReadDir(netns.Dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), mine) {
			t.Errorf("namespace %s left behind", e.Name())
		}
	}
	iface := fmt.Sprintf("xdpd%dr", os.Getpid())
	if s, err := loader.Open(iface); err == nil {
		s.Close()
		t.Errorf("pins of %s left behind", iface)
	}
}
