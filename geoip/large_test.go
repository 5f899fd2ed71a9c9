// SPDX-License-Identifier: Apache-2.0

package geoip

import (
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/maxmind/mmdbwriter/mmdbtype"
)

// A database of 500k networks (400k IPv4 /24s, 100k IPv6 /40s), each
// country's scattered so that little merges: the time and memory to
// compute sets from it are logged, not asserted (the machine is shared).
// The work is one walk of the tree and one decode per distinct record,
// so it grows linearly with the networks.
func TestLargeDatabase(t *testing.T) {
	if testing.Short() {
		t.Skip("writes a 500k-network database (-short)")
	}
	const n4, n6 = 400_000, 100_000
	codes := make([]string, 0, 26*9)
	for a := 'A'; a <= 'Z'; a++ {
		for b := 'A'; b <= 'I'; b++ {
			codes = append(codes, string([]rune{a, b}))
		}
	}
	records := make([]mmdbtype.Map, len(codes))
	for i, c := range codes {
		records[i] = country(c, c)
	}
	// Multiplicative hashing spreads neighbours over the countries.
	of := func(i int) int { return int(uint32(i)*2654435761>>8) % len(codes) }

	start := time.Now()
	tree := newTree(t, "GeoLite2-Country", nil)
	for i := range n4 {
		// i*41 mod 2^24 is a permutation of the /24s: distinct, scattered.
		x := uint32(i) * 41 % (1 << 24)
		insert(t, tree, netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(x >> 16), byte(x >> 8), byte(x), 0}), 24), records[of(i)])
	}
	for i := range n6 {
		a := [16]byte{0x2a, 0x00, byte(i >> 16), byte(i >> 8), byte(i)}
		insert(t, tree, netip.PrefixFrom(netip.AddrFrom16(a), 40), records[of(n4+i)])
	}
	path := writeTree(t, tree)
	tree = nil
	t.Logf("wrote %d networks in %v", n4+n6, time.Since(start).Round(time.Millisecond))

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start = time.Now()
	db := openDB(t, path)
	opened := time.Since(start)
	networks := 0
	for res := range db.r.Networks() {
		if res.Err() != nil {
			t.Fatal(res.Err())
		}
		networks++
	}
	if networks < n4+n6 {
		t.Fatalf("%d networks in the database, want at least %d", networks, n4+n6)
	}

	start = time.Now()
	one, err := db.Countries([]string{"DE"})
	if err != nil {
		t.Fatal(err)
	}
	tookOne := time.Since(start)
	start = time.Now()
	all, err := db.Countries(codes)
	if err != nil {
		t.Fatal(err)
	}
	tookAll := time.Since(start)
	runtime.ReadMemStats(&after)

	total, mem := 0, uint64(0)
	for _, s := range all {
		total += s.Len()
		mem += s.MemoryBytes()
	}
	if one[0].Len() != all[slices.Index(codes, "DE")].Len() || total < (n4+n6)*9/10 {
		t.Fatalf("DE: %d prefixes alone, %d among all; %d prefixes in all sets", one[0].Len(),
			all[slices.Index(codes, "DE")].Len(), total)
	}
	t.Logf("%d networks, %d MB file: open %v; one country (%d prefixes) %v; all %d countries (%d prefixes, %s in tries) %v; "+
		"%s allocated, heap %s -> %s",
		networks, db.Metadata().FileSize>>20, opened.Round(time.Millisecond), one[0].Len(), tookOne.Round(time.Millisecond),
		len(codes), total, mib(mem), tookAll.Round(time.Millisecond),
		mib(after.TotalAlloc-before.TotalAlloc), mib(before.HeapInuse), mib(after.HeapInuse))
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
