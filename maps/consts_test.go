// SPDX-License-Identifier: Apache-2.0

package maps

import (
	"testing"

	"github.com/xdplimit/xdplimit/gen"
	"github.com/xdplimit/xdplimit/model"
)

// TestModelConstants: the reference models restate a few of the datapath's
// constants; they must agree, or the model tests would check another
// algorithm than the one the program runs.
func TestModelConstants(t *testing.T) {
	for _, c := range []struct {
		name      string
		bpf, goes uint64
	}{
		{"token bucket", uint64(gen.XdplimitXdplConstXDPL_ALG_TOKEN_BUCKET), model.AlgTokenBucket},
		{"fixed window", uint64(gen.XdplimitXdplConstXDPL_ALG_FIXED_WINDOW), model.AlgFixedWindow},
		{"sliding window", uint64(gen.XdplimitXdplConstXDPL_ALG_SLIDING_WINDOW), model.AlgSlidingWindow},
		{"sliding log", uint64(gen.XdplimitXdplConstXDPL_ALG_SLIDING_LOG), model.AlgSlidingLog},
		{"log max", uint64(gen.XdplimitXdplConstXDPL_LOG_MAX), model.LogMax},
		{"time shift", uint64(gen.XdplimitXdplConstXDPL_TIME_SHIFT), model.TimeShift},
		{"fp shift", uint64(gen.XdplimitXdplConstXDPL_FP_SHIFT), model.FPShift},
		{"count bits", uint64(gen.XdplimitXdplConstXDPL_WIN_COUNT_BITS), model.CountBits},
		{"seq bits", uint64(gen.XdplimitXdplConstXDPL_WIN_SEQ_BITS), model.SeqBits},
		{"sliding window time bits", uint64(gen.XdplimitXdplConstXDPL_SW_TIME_BITS), model.SWTimeBits},
	} {
		if c.bpf != c.goes {
			t.Errorf("model and datapath disagree on %s: %d vs %d", c.name, c.goes, c.bpf)
		}
	}
}
