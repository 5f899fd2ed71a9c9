// SPDX-License-Identifier: Apache-2.0

package autopilot

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/xdplimit/xdplimit/replay"
)

// ReadCapture reads the samples of the frames a host received in the
// capture at path (pcap or pcapng, gzipped or not): frames it sent are
// left out, as the datapath never sees them. A capture cut short is read
// up to the cut and the cut returned as cut.
func ReadCapture(path string) (samples []Sample, cut *replay.CutOff, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	c, err := replay.OpenCapture(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	defer c.Close()
	var last Sample
	for {
		fr, err := c.Next()
		var co *replay.CutOff
		switch {
		case errors.Is(err, io.EOF):
			return samples, nil, nil
		case errors.As(err, &co):
			return samples, co, nil
		case err != nil:
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		if fr.Outgoing {
			continue
		}
		ts := fr.Time
		if ts.IsZero() { // a pcapng simple packet block: the frame before's time
			ts = last.Time
		}
		if s, ok := FromFrame(fr.Data, ts); ok {
			samples = append(samples, s)
			last = s
		}
	}
}
