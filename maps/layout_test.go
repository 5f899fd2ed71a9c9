// SPDX-License-Identifier: Apache-2.0

package maps_test

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/internal/testkit/xdpltest"
	"github.com/xdplimit/xdplimit/maps"
)

// Pinned maps left by an xdplimit of the previous map layout (layout 2's
// sketch cells were 4 bytes) are refused with a message that says
// what to do, by both Load (attach, reload) and OpenPinned (status,
// metrics), before the kernel gets to refuse the changed sketch map.
func TestPinnedLayoutMismatch(t *testing.T) {
	xdpltest.RequireBPF(t)
	spec, err := gen.LoadXdplimit()
	if err != nil {
		t.Fatal(err)
	}
	meta, err := ebpf.NewMap(spec.Maps[gen.XdplimitMapXdplMeta])
	if err != nil {
		t.Fatal(err)
	}
	defer meta.Close()
	buf := make([]byte, meta.ValueSize())
	binary.NativeEndian.PutUint32(buf, maps.LayoutVersion-1)
	if err := meta.Put(uint32(0), buf); err != nil {
		t.Fatal(err)
	}
	oldSketch := spec.Maps[gen.XdplimitMapXdplSketchMap].Copy()
	oldSketch.ValueSize = 4
	sketch, err := ebpf.NewMap(oldSketch)
	if err != nil {
		t.Fatal(err)
	}
	defer sketch.Close()
	pinned := map[string]*ebpf.Map{gen.XdplimitMapXdplMeta: meta, gen.XdplimitMapXdplSketchMap: sketch}

	want := fmt.Sprintf("layout version %d, this xdplimit reads %d: detach first", maps.LayoutVersion-1, maps.LayoutVersion)
	if l, err := maps.Load(maps.Options{Pinned: pinned}); err == nil || !strings.Contains(err.Error(), want) {
		if l != nil {
			l.Close()
		}
		t.Errorf("Load: %v, want an error containing %q", err, want)
	}
	if l, err := maps.OpenPinned(pinned); err == nil || !strings.Contains(err.Error(), want) {
		if l != nil {
			l.Close()
		}
		t.Errorf("OpenPinned: %v, want an error containing %q", err, want)
	}
}
