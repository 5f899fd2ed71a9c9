// SPDX-License-Identifier: Apache-2.0

package compiler

import (
	"github.com/xdplimit/xdplimit/maps"
	"github.com/xdplimit/xdplimit/policy"
)

// SampleOneIn splits the drop log's "one in N" between the datapath and the
// log's reader. The datapath samples one in a power of two (a mask on its
// random number: one AND on the drop path), never rarer than the default
// that top needs: the largest power of two not above N, at most
// maps.DefaultSampleOneIn. The reader keeps each sample with probability
// keep = datapath / N, so that one in N drops reaches the log on average.
func SampleOneIn(l policy.Log) (datapath uint32, keep float64) {
	n := l.SampleOneIn()
	datapath = 1
	for datapath < maps.DefaultSampleOneIn && float64(datapath*2) <= n {
		datapath *= 2
	}
	return datapath, float64(datapath) / n
}
