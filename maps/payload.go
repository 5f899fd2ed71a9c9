// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// writePayload replaces generation g's payload windows and values
// (bpf/classify_payload.h) with img's. The values of the other generation
// stay: the hash holds a rule's one value for each.
func (l *Limiter) writePayload(g uint32, img *Image) error {
	m := &l.objs.XdplimitMaps
	if len(img.Payload) > PayloadShapes {
		return fmt.Errorf("payload matches: %d windows, the datapath holds %d", len(img.Payload), PayloadShapes)
	}
	if err := clearGen[gen.XdplimitXdplPayloadKey, Bitmap](m.XdplPayload, g,
		func(k *gen.XdplimitXdplPayloadKey) uint32 { return k.GenShape / uint32(PayloadShapes) }); err != nil {
		return fmt.Errorf("payload matches: clearing generation %d: %w", g, err)
	}
	var cfg gen.XdplimitXdplPayloadCfg
	cfg.Nshapes = uint32(len(img.Payload))
	for i, s := range img.Payload {
		c := &cfg.Shape[i]
		c.Off, c.Need, c.Mask, c.Absent = s.Off, s.Need, s.Mask, s.Absent
		for v, rules := range s.Values {
			k := gen.XdplimitXdplPayloadKey{GenShape: g*uint32(PayloadShapes) + uint32(i), Bytes: v}
			if err := m.XdplPayload.Update(&k, &rules, ebpf.UpdateAny); err != nil {
				return fmt.Errorf("payload matches: window %d: %w", i, err)
			}
		}
	}
	cfg.Empty = payloadEmpty(img.Payload)
	if err := m.XdplPayloadShapes.Update(g, &cfg, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("payload matches: %w", err)
	}
	return nil
}

// payloadEmpty is the rules a packet without payload satisfies: those that
// read no window, the AND of every window's Absent.
func payloadEmpty(shapes []PayloadShape) Bitmap {
	var b Bitmap
	for w := range b.W {
		b.W[w] = ^uint64(0)
	}
	for _, s := range shapes {
		for w := range b.W {
			b.W[w] &= s.Absent.W[w]
		}
	}
	return b
}
