// SPDX-License-Identifier: Apache-2.0

package iperf3

import "testing"

func TestParse(t *testing.T) {
	bps, msg, err := Parse([]byte(`{"start": {}, "end": {"sum_received": {"bits_per_second": 9.5e8}}}`))
	if err != nil || bps != 9.5e8 || msg != "" {
		t.Errorf("a report: %v %q %v", bps, msg, err)
	}
	_, msg, err = Parse([]byte(`{"start": {}, "error": "unable to connect to server: Connection refused"}`))
	if err != nil || msg != "unable to connect to server: Connection refused" {
		t.Errorf("an error: %q %v", msg, err)
	}
	if _, _, err := Parse([]byte("iperf3: error - unable to connect")); err == nil {
		t.Error("text read as a report")
	}
}
