// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// Scrape reads a Prometheus text exposition from url with c: every series
// (its name and labels as the exposition writes them, labels sorted by
// name) with its value.
func Scrape(tb testing.TB, c *http.Client, url string) map[string]float64 {
	tb.Helper()
	resp, err := c.Get(url)
	if err != nil {
		tb.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		tb.Fatalf("scrape %s: %s %v", url, resp.Status, err)
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if strings.HasPrefix(line, "#") || i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			tb.Fatalf("scrape %s: line %q: %v", url, line, err)
		}
		m[line[:i]] = v
	}
	return m
}
