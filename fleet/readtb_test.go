// SPDX-License-Identifier: Apache-2.0

package fleet

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"
)

// The token-bucket script's reply as the engine reads it: a debt, and
// whether the script set the key back. Anything the script cannot answer,
// a debt beyond the most it allows among them, is "not a Redis" and moves
// no bucket.
func TestReadTB(t *testing.T) {
	const maxUs = 2_200_000
	for _, tc := range []struct {
		name    string
		reply   []any
		debt    float64
		clamped bool
		bad     bool
	}{
		{"debt", []any{"xdpl1", "1500.250", int64(0)}, 1500.25, false, false},
		{"behind now", []any{"xdpl1", "-20.000", int64(0)}, 0, false, false},
		{"set back", []any{"xdpl1", "2200000.000", int64(1)}, maxUs, true, false},
		{"beyond the most", []any{"xdpl1", "2200001.000", int64(0)}, 0, false, true},
		{"huge", []any{"xdpl1", "1e21", int64(1)}, 0, false, true},
		{"not a number", []any{"xdpl1", "inf", int64(0)}, 0, false, true},
		{"flag not 0 or 1", []any{"xdpl1", "10.000", int64(2)}, 0, false, true},
		{"flag missing", []any{"xdpl1", "10.000"}, 0, false, true},
		{"another script", []any{"ok", "10.000", int64(0)}, 0, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := redis.NewCmd(context.Background())
			c.SetVal(tc.reply)
			debt, clamped, err := readTB(c, maxUs)
			if tc.bad {
				if !errors.Is(err, errNotRedis) {
					t.Fatalf("%v: got %v, %v, %v; want a not-a-Redis error", tc.reply, debt, clamped, err)
				}
				return
			}
			if err != nil || debt != tc.debt || clamped != tc.clamped {
				t.Fatalf("%v: got %v, %v, %v; want %v, %v", tc.reply, debt, clamped, err, tc.debt, tc.clamped)
			}
		})
	}
}
