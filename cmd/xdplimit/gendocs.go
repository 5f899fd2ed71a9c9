// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"

	"github.com/xdplimit/xdplimit/internal/buildinfo"
)

// newGenDocsCmd writes the man pages and shell completions that make dist
// packages, from this very command tree, so they cannot drift from the
// flags the binary takes. Hidden: a build step, not an operator's command.
func newGenDocsCmd() *cobra.Command {
	return &cobra.Command{
		Use:    "gendocs DIR",
		Short:  "Write man pages (DIR/man8) and shell completions (DIR/bash, DIR/zsh, DIR/fish)",
		Args:   cobra.ExactArgs(1),
		Hidden: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return genDocs(cmd.Root(), args[0])
		},
	}
}

func genDocs(root *cobra.Command, dir string) error {
	info := buildinfo.Read()
	// The page date is the build's (the commit's) date, not today's, so
	// that two builds of one commit give identical packages.
	date := time.Unix(0, 0).UTC()
	if t, err := time.Parse(time.RFC3339, info.Date); err == nil {
		date = t.UTC()
	}
	man := filepath.Join(dir, "man8")
	for _, d := range []string{man, filepath.Join(dir, "bash"), filepath.Join(dir, "zsh"), filepath.Join(dir, "fish")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// Section 8: every command but policy check works on the kernel's BPF
	// state and runs as root.
	root.DisableAutoGenTag = true
	header := &doc.GenManHeader{Section: "8", Date: &date, Source: "xdplimit " + info.Version, Manual: "System Manager's Manual"}
	if err := doc.GenManTree(root, header, man); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	completions := []struct {
		path string
		gen  func(f *os.File) error
	}{
		{filepath.Join(dir, "bash", "xdplimit"), func(f *os.File) error { return root.GenBashCompletionV2(f, true) }},
		{filepath.Join(dir, "zsh", "_xdplimit"), func(f *os.File) error { return root.GenZshCompletion(f) }},
		{filepath.Join(dir, "fish", "xdplimit.fish"), func(f *os.File) error { return root.GenFishCompletion(f, true) }},
	}
	for _, c := range completions {
		if err := writeWith(c.path, c.gen); err != nil {
			return fmt.Errorf("completion: %w", err)
		}
	}
	return nil
}

// writeWith creates path and fills it with gen, reporting a failed close.
func writeWith(path string, gen func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := gen(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
