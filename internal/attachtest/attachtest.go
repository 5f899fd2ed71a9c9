// Package attachtest attaches xdplimit natively to the receiving end of a
// veth pair of the test's own, for the end-to-end tests of the packages
// that read a running attach (metrics, droplog). It is not part of
// internal/testutil because loader's own tests import testutil, which
// therefore cannot import loader.
package attachtest

import (
	"fmt"
	"os"
	"testing"

	"github.com/xdplimit/xdplimit/internal/testutil"
	"github.com/xdplimit/xdplimit/loader"
)

// Native makes a veth pair named tag+"s"+id and tag+"r"+id, attaches cfg
// natively to the second end, in its namespace, and detaches when the test
// ends (before the pair goes). id comes from the process's PID: pins live
// under /sys/fs/bpf/xdplimit/<interface>, shared with every other test on
// the machine, so the names must be unique. cfg.Interface and cfg.Mode are
// set here; a nil cfg.Warn logs to the test.
func Native(t *testing.T, tag string, cfg loader.Config) (*testutil.Veth, *loader.Attachment) {
	t.Helper()
	id := fmt.Sprintf("%04x", os.Getpid()&0xffff)
	v := testutil.NewVethPair(t, testutil.VethConfig{Name: tag + "s" + id, PeerName: tag + "r" + id})
	cfg.Interface, cfg.Mode = v.PeerName, loader.ModeNative
	if cfg.Warn == nil {
		cfg.Warn = func(s string) { t.Log("attach:", s) }
	}
	var a *loader.Attachment
	err := v.PeerNS.Do(func() error {
		var err error
		a, err = loader.Attach(cfg)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := a.Detach(); err != nil {
			t.Errorf("detach: %v", err)
		}
	})
	return v, a
}
