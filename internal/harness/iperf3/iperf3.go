// SPDX-License-Identifier: Apache-2.0

// Package iperf3 reads what iperf3's client prints with -J: the throughput
// its server received, or the error that ended the test.
package iperf3

import (
	"encoding/json"
	"fmt"
)

// Parse reads a client's JSON report: bits per second received at the
// server, and the error iperf3 reported ("" when none). err is set when
// out is not a report at all.
func Parse(out []byte) (bps float64, reported string, err error) {
	var res struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return 0, "", fmt.Errorf("iperf3's report is unreadable: %w", err)
	}
	return res.End.SumReceived.BitsPerSecond, res.Error, nil
}
