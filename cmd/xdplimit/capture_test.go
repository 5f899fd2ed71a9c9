// SPDX-License-Identifier: Apache-2.0

package main

import "testing"

func TestCaptureRefuses(t *testing.T) {
	cases := []cliCase{
		refused("no interface", "accepts 1 arg(s), received 0", "capture", "-w", "x.pcap"),
		refused("no file", "-w FILE is required: where the capture goes", "capture", noIface),
		refused("no bound", "give --duration or --count (or both): capture stops at the first",
			"capture", noIface, "-w", "x.pcap", "--duration", "0"),
		refused("not attached", notAttached(t), "capture", noIface, "-w", "x.pcap", "--count", "1"),
	}
	runCases(t, append(cases, badNameCases("capture", "-w", "x.pcap")...))
}
