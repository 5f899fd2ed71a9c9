// SPDX-License-Identifier: Apache-2.0

// Package policy parses and validates xdplimit's YAML policy files into a
// typed, normalised Policy that the compiler turns into BPF map entries.
//
// Every rule of the language and every range the datapath is documented to
// hold is checked here, with the file, line, column and field of each
// problem, so that the compiler only meets values within those ranges.
// A file with any error yields no Policy at all. docs/policy.md is the
// reference of the language.
package policy
