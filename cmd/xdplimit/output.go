// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/internal/termsafe"
)

// The output formats of the commands scripts read: text for people, JSON
// with stable snake_case field names (docs/json.md).
const (
	outputText = "text"
	outputJSON = "json"
)

// addOutputFlag gives cmd -o/--output text|json; it returns where the
// flag's value goes, checked before the command runs.
func addOutputFlag(cmd *cobra.Command) *string {
	out := outputText
	cmd.Flags().StringVarP(&out, "output", "o", outputText, "output format: text, or json for scripts (docs/json.md)")
	pre := cmd.PreRunE
	cmd.PreRunE = func(c *cobra.Command, args []string) error {
		if out != outputText && out != outputJSON {
			return fmt.Errorf("--output %q: give text or json", out)
		}
		if pre != nil {
			return pre(c, args)
		}
		return nil
	}
	return &out
}

// printJSON writes v as indented JSON and a newline. Text from outside
// (ban reasons, rule names, paths) is escaped as encoding/json escapes it,
// and the characters it leaves raw that a terminal would act on are
// escaped too (termsafe.JSON): the output stays valid JSON.
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(termsafe.JSON(b), '\n'))
	return err
}
