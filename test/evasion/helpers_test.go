// SPDX-License-Identifier: Apache-2.0

package evasion

import (
	"os"
	"strconv"
	"testing"
	"time"
)

// seed is XDPL_EVASION_SEED when set, else a new one from the clock; the
// test prints it so that a failure can be replayed.
func seed(t *testing.T) uint64 {
	if s := os.Getenv("XDPL_EVASION_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 0, 64)
		if err != nil {
			t.Fatalf("XDPL_EVASION_SEED=%q: %v", s, err)
		}
		return v
	}
	return uint64(time.Now().UnixNano())
}
