// SPDX-License-Identifier: Apache-2.0

package compiler

import (
	"fmt"

	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// compilePayload gathers the rules' payload matches into windows
// (bpf/classify_payload.h): one per distinct start and mask, each rule
// reading one. A rule that reads no window is in every window's bitmaps,
// absent included. It fails when the policy uses more windows than the
// datapath looks up.
func compilePayload(img *maps.Image, rules []policy.Rule) error {
	type shapeKey struct {
		start int
		mask  [maps.PayloadWindow]byte
	}
	index := map[shapeKey]int{}
	var shapes []maps.PayloadShape
	uses := make([]int, len(rules)) // the window each rule reads, or -1
	for i, r := range rules {
		uses[i] = -1
		start, value, mask, ok := r.Match.PayloadWindow()
		if !ok {
			continue
		}
		k := shapeKey{start, mask}
		s, seen := index[k]
		if !seen {
			if len(shapes) == maps.PayloadShapes {
				return fmt.Errorf("the rules' payload matches use more than %d distinct windows "+
					"(a window is a start offset and a mask); the datapath looks up at most %d: "+
					"give rules that match the same bytes the same offsets and masks", maps.PayloadShapes, maps.PayloadShapes)
			}
			s = len(shapes)
			index[k] = s
			shapes = append(shapes, maps.PayloadShape{Off: uint16(start), Need: uint8(policy.PayloadNeed(mask)), Mask: mask,
				Values: map[[maps.PayloadWindow]byte]maps.Bitmap{}})
		}
		uses[i] = s
		bm := shapes[s].Values[value]
		maps.SetBit(&bm, i)
		shapes[s].Values[value] = bm
	}
	if len(shapes) == 0 {
		return nil
	}
	img.Dims |= maps.DimPayload
	for s := range shapes {
		for i := range rules {
			if uses[i] != s {
				maps.SetBit(&shapes[s].Absent, i)
			}
		}
		for v, bm := range shapes[s].Values {
			for w := range bm.W {
				bm.W[w] |= shapes[s].Absent.W[w]
			}
			shapes[s].Values[v] = bm
		}
	}
	img.Payload = shapes
	return nil
}
