package evasion

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/xdplimit/xdplimit/compiler"
	"github.com/xdplimit/xdplimit/internal/testutil"
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// loadPolicy loads the XDP program with a policy, unattached, and closes it
// when the test ends.
func loadPolicy(t testing.TB, opts maps.Options, yaml string) *maps.Limiter {
	t.Helper()
	l := loadPolicyNoCleanup(t, opts, yaml)
	t.Cleanup(func() { l.Close() })
	return l
}

func loadPolicyNoCleanup(t testing.TB, opts maps.Options, yaml string) *maps.Limiter {
	t.Helper()
	testutil.RequireRoot(t)
	p, err := policy.Parse("evasion.yaml", []byte(yaml))
	if err != nil {
		t.Fatalf("policy: %v", err)
	}
	img, err := compiler.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	l, err := maps.Load(opts)
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	if err := l.Apply(img); err != nil {
		l.Close()
		t.Fatal(err)
	}
	return l
}

// seed is XDPL_EVASION_SEED when set, else a new one from the clock; the
// test prints it so that a failure can be replayed.
func seed(t *testing.T) uint64 {
	if s := os.Getenv("XDPL_EVASION_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("XDPL_EVASION_SEED=%q: %v", s, err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}
