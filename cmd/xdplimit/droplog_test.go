package main

import (
	"testing"

	"github.com/xdplimit/xdplimit/policy"
)

// --log-drops=PATH wins over the policy's file; plain --log-drops (or -)
// leaves the choice to the policy, and stdout is the default.
func TestDropLogOutput(t *testing.T) {
	for _, c := range []struct{ flag, file, want string }{
		{"-", "", "-"},
		{"-", "/var/log/p.jsonl", "/var/log/p.jsonl"},
		{"", "/var/log/p.jsonl", "/var/log/p.jsonl"},
		{"/tmp/f.jsonl", "/var/log/p.jsonl", "/tmp/f.jsonl"},
		{"/tmp/f.jsonl", "", "/tmp/f.jsonl"},
	} {
		r := &dropLogRunner{flag: c.flag}
		if got := r.output(policy.Log{File: c.file, Set: true}); got != c.want {
			t.Errorf("--log-drops=%q, log.file %q: output %q, want %q", c.flag, c.file, got, c.want)
		}
	}
}
