// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"path/filepath"
	"testing"
)

// TestExamples loads every policy in examples/: they are documentation, so
// they must load without errors and without warnings.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("../examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no examples found")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			p, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range p.Warnings {
				t.Error(w)
			}
			if len(p.Rules) == 0 {
				t.Error("no rules")
			}
		})
	}
}
