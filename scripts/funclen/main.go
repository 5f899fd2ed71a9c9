// SPDX-License-Identifier: Apache-2.0

// Command funclen reports the Go functions longer than a limit, for
// scripts/check-sizes.sh. A function a reader cannot hold in their head at
// once is where bugs hide; a table-driven test's table is data read a row at
// a time, so its lines do not count.
//
// Usage: go run ./scripts/funclen [-max N] FILE.go...
//
// It prints "file:line: name is N lines (limit M)" for each function over
// the limit and exits 1 when there is any.
package main

import (
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
)

func main() {
	limit := flag.Int("max", 80, "the longest a function may be, in lines")
	flag.Parse()
	fset := token.NewFileSet()
	over := 0
	for _, path := range flag.Args() {
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		isTest := strings.HasSuffix(path, "_test.go")
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			n := length(fset, fn, isTest)
			if n > *limit {
				fmt.Printf("%s:%d: %s is %d lines (limit %d)\n",
					path, fset.Position(fn.Pos()).Line, name(fn), n, *limit)
				over++
			}
		}
	}
	if over > 0 {
		os.Exit(1)
	}
}

// length counts a function's lines, from its doc-less signature to its
// closing brace, less the lines of the test tables in a test file.
func length(fset *token.FileSet, fn *ast.FuncDecl, isTest bool) int {
	lines := span(fset, fn.Pos(), fn.End())
	if isTest {
		for _, t := range tables(fn.Body) {
			lines -= span(fset, t.Pos(), t.End())
		}
	}
	return lines
}

// tables finds the outermost test tables in body: slice, array or map
// literals whose elements are composite literals (the cases, a row each).
func tables(body *ast.BlockStmt) []*ast.CompositeLit {
	var found []*ast.CompositeLit
	ast.Inspect(body, func(n ast.Node) bool {
		lit, ok := n.(*ast.CompositeLit)
		if !ok {
			return true
		}
		if isTable(lit) {
			found = append(found, lit)
			return false // a table inside a table is counted once
		}
		return true
	})
	return found
}

func isTable(lit *ast.CompositeLit) bool {
	switch lit.Type.(type) {
	case *ast.ArrayType, *ast.MapType:
	default:
		return false
	}
	if len(lit.Elts) == 0 {
		return false
	}
	for _, e := range lit.Elts {
		if kv, ok := e.(*ast.KeyValueExpr); ok {
			e = kv.Value
		}
		if _, ok := e.(*ast.CompositeLit); !ok {
			return false
		}
	}
	return true
}

func span(fset *token.FileSet, from, to token.Pos) int {
	return fset.Position(to).Line - fset.Position(from).Line + 1
}

// name is the function as a reader looks for it: Recv.Method or func.
func name(fn *ast.FuncDecl) string {
	if fn.Recv == nil || len(fn.Recv.List) == 0 {
		return fn.Name.Name
	}
	t := fn.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch r := t.(type) {
	case *ast.IndexExpr:
		t = r.X
	case *ast.IndexListExpr:
		t = r.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fn.Name.Name
	}
	return fn.Name.Name
}
