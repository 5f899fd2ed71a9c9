package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strconv"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/internal/testutil"
	"github.com/xdplimit/xdplimit/loader"
)

// env adapts the benchmark run to testing.TB, so that the namespaces and
// veth pairs come from internal/testutil, the one implementation the tests
// use, with its cleanup guarantees: deleted when the run ends, on SIGINT,
// SIGTERM and SIGHUP (testutil's handler), and swept by pid on the next run
// after a SIGKILL.
//
// testing.TB cannot be implemented outside package testing (it has an
// unexported method), so env embeds a nil TB and defines every exported
// method. Fatal and Skip panic with a benchFailure, which try turns back
// into an error.
type env struct {
	testing.TB

	ctx context.Context
	log *log.Logger

	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

type benchFailure struct{ msg string }

func newEnv(ctx context.Context, w io.Writer) *env {
	return &env{ctx: ctx, log: log.New(w, "bench: ", log.Ltime)}
}

// close runs the cleanups, last registered first, as testing does.
func (e *env) close() {
	e.mu.Lock()
	cs := e.cleanups
	e.cleanups = nil
	e.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		func() {
			defer func() {
				if p := recover(); p != nil {
					e.log.Printf("cleanup: %v", p)
				}
			}()
			cs[i]()
		}()
	}
}

// try runs fn and returns its failure (a Fatal through env, or any panic)
// as an error, so that one broken measurement does not end the run.
func try(fn func() error) (err error) {
	defer func() {
		switch p := recover().(type) {
		case nil:
		case benchFailure:
			err = errors.New(p.msg)
		default:
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return fn()
}

func (e *env) ArtifactDir() string      { return e.TempDir() }
func (e *env) Attr(key, value string)   {}
func (e *env) Chdir(dir string)         { _ = os.Chdir(dir) }
func (e *env) Context() context.Context { return e.ctx }
func (e *env) Helper()                  {}
func (e *env) Name() string             { return "xdplimit-bench" }
func (e *env) Output() io.Writer        { return e.log.Writer() }
func (e *env) Setenv(key, value string) { _ = os.Setenv(key, value) }
func (e *env) Skipped() bool            { return false }

func (e *env) Cleanup(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cleanups = append(e.cleanups, f)
}

func (e *env) Log(args ...any)                 { e.log.Print(args...) }
func (e *env) Logf(format string, args ...any) { e.log.Printf(format, args...) }

func (e *env) Fail() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.failed = true
}

func (e *env) Failed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failed
}

func (e *env) Error(args ...any)                 { e.Fail(); e.log.Print(args...) }
func (e *env) Errorf(format string, args ...any) { e.Fail(); e.log.Printf(format, args...) }

func (e *env) FailNow()          { e.Fail(); panic(benchFailure{"failed"}) }
func (e *env) Fatal(args ...any) { e.Fail(); panic(benchFailure{fmt.Sprint(args...)}) }
func (e *env) Fatalf(format string, args ...any) {
	e.Fail()
	panic(benchFailure{fmt.Sprintf(format, args...)})
}

// A skip is a failure here: a benchmark that cannot run a configuration
// reports why instead of silently leaving it out.
func (e *env) SkipNow()                         { panic(benchFailure{"skipped"}) }
func (e *env) Skip(args ...any)                 { panic(benchFailure{fmt.Sprint(args...)}) }
func (e *env) Skipf(format string, args ...any) { panic(benchFailure{fmt.Sprintf(format, args...)}) }

func (e *env) TempDir() string {
	dir, err := os.MkdirTemp("", "xdplbench-")
	if err != nil {
		e.Fatalf("temp dir: %v", err)
	}
	e.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// ifPrefix starts the name of every interface the loader pins state for
// (pins live in the host's bpffs, keyed by interface name, whatever the
// namespace), followed by our pid so that sweepPins can tell a dead run's.
const ifPrefix = "xb"

// attachIfname is the receiving interface of the control-plane veth: unique
// to this process because loader pins and locks are global.
func attachIfname() string { return fmt.Sprintf("%s%dr", ifPrefix, os.Getpid()) }

var pinName = regexp.MustCompile(`^` + ifPrefix + `([0-9]+)r$`)

// sweepPins removes the loader pins and lock files a killed benchmark run
// left behind: its namespaces are gone (testutil sweeps them), but pins in
// bpffs outlive them.
func sweepPins(l *log.Logger) {
	for _, dir := range []string{loader.PinRoot, "/run/xdplimit"} {
		ents, _ := os.ReadDir(dir)
		for _, ent := range ents {
			name := ent.Name()
			if filepath.Ext(name) == ".lock" {
				name = name[:len(name)-len(".lock")]
			}
			m := pinName.FindStringSubmatch(name)
			if m == nil {
				continue
			}
			pid, _ := strconv.Atoi(m[1])
			if err := unix.Kill(pid, 0); err == nil || errors.Is(err, unix.EPERM) {
				continue // a live run
			}
			if err := os.RemoveAll(filepath.Join(dir, ent.Name())); err != nil {
				l.Printf("removing stale %s: %v", filepath.Join(dir, ent.Name()), err)
			} else {
				l.Printf("removed %s left by a dead benchmark run", filepath.Join(dir, ent.Name()))
			}
		}
	}
	_ = os.Remove(loader.PinRoot) // only when empty
}

// vethPair creates two namespaces and a two-queue veth pair between them
// through testutil; they are deleted when the run ends.
func (e *env) vethPair(name, peer string, subnet int) (v *testutil.Veth, err error) {
	err = try(func() error {
		v = testutil.NewVethPair(e, testutil.VethConfig{
			Name: name, PeerName: peer, Queues: 2,
			Addr:      prefix("198.18.%d.1/24", subnet),
			PeerAddr:  prefix("198.18.%d.2/24", subnet),
			Addr6:     prefix("2001:2:0:%d::1/64", subnet),
			PeerAddr6: prefix("2001:2:0:%d::2/64", subnet),
		})
		return nil
	})
	return v, err
}
