// SPDX-License-Identifier: Apache-2.0

package main

import (
	"strings"
	"testing"
)

func TestApplyRuns(t *testing.T) {
	tests := []testBinary{{Name: "maps.test"}, {Name: "test_vm.test"}}
	err := applyRuns(tests, []string{`maps.test=TestVerifierBudget/^(ktime|map)$`, "test_vm.test=^TestAttach"})
	if err != nil {
		t.Fatal(err)
	}
	if tests[0].Run != `TestVerifierBudget/^(ktime|map)$` || tests[1].Run != "^TestAttach" {
		t.Fatalf("filters not set as given: %+v", tests)
	}
	for _, c := range []struct{ run, why string }{
		{"maps.test", "no pattern"},
		{"=TestX", "no name"},
		{"maps.test=", "an empty pattern"},
		{"other.test=TestX", "a binary that is not run"},
		{"maps.test=TestX(", "a pattern that does not compile"},
		{"maps.test=TestX/sub[", "a subtest pattern that does not compile"},
	} {
		if err := applyRuns([]testBinary{{Name: "maps.test"}}, []string{c.run}); err == nil {
			t.Errorf("--run %q accepted: %s", c.run, c.why)
		}
	}
	twice := []testBinary{{Name: "maps.test"}}
	if err := applyRuns(twice, []string{"maps.test=TestA", "maps.test=TestB"}); err == nil ||
		!strings.Contains(err.Error(), "already runs only TestA") {
		t.Errorf("a second filter for one binary: %v", err)
	}
}

func TestApplyAlone(t *testing.T) {
	tests := []testBinary{{Name: "maps.test"}, {Name: "test_vm.test"}}
	if err := applyAlone(tests, []string{"test_vm.test"}); err != nil {
		t.Fatal(err)
	}
	if tests[0].Alone || !tests[1].Alone {
		t.Fatalf("alone not set as given: %+v", tests)
	}
	if err := applyAlone(tests, []string{"other.test"}); err == nil {
		t.Error("--alone accepted a binary that is not run")
	}
}
