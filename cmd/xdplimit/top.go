// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/metrics"
)

func newTopCmd() *cobra.Command {
	var (
		once     bool
		interval time.Duration
	)
	cmd := &cobra.Command{
		Use:   "top IFACE",
		Short: "Show live per-rule pass and drop rates of an attached limiter",
		Long: `top reads the pinned counters of the limiter on IFACE every interval and shows
per-rule pass, drop and shadow-drop rates, the allow and deny lists, unmatched
and malformed traffic, and the state table's pressure. It only reads counters:
the per-source state table is never walked.

On a terminal the view is redrawn in place (ANSI clear); otherwise, and with
--once (one frame after one interval, for scripts), it prints plain text.`,
		Args: cobra.MatchAll(cobra.ExactArgs(1), ifaceNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			if interval < 100*time.Millisecond {
				return fmt.Errorf("--interval %v: at least 100ms", interval)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			out := cmd.OutOrStdout()
			return runTop(ctx, out, args[0], interval, once, !once && isTerminal(out))
		},
	}
	cmd.Flags().BoolVar(&once, "once", false, "print one frame after one interval and exit")
	cmd.Flags().DurationVar(&interval, "interval", metrics.TopInterval, "refresh interval")
	return cmd
}

// topSources is how many dropped sources top lists.
const topSources = 10

func runTop(ctx context.Context, w io.Writer, iface string, interval time.Duration, once, clear bool) error {
	s, err := loader.Open(iface)
	if err != nil {
		return err
	}
	defer s.Close()
	prev, err := metrics.Read(iface, s.Limiter)
	if err != nil {
		return err
	}
	ring, err := metrics.NewDropReader(s.Limiter)
	if err != nil {
		return err
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var frame bytes.Buffer
	for {
		samples, _, err := ring.Next(ctx, tick.C)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		cur, err := metrics.Read(iface, s.Limiter)
		if err != nil {
			return fmt.Errorf("%w (detached?)", err)
		}
		frame.Reset()
		if clear {
			frame.WriteString("\x1b[H\x1b[2J") // home, clear screen
		}
		names, err := s.Limiter.SlotNames()
		if err != nil {
			return err
		}
		top := metrics.TopSources(samples, names, metrics.TotalDrops(prev, cur), cur.Time.Sub(prev.Time), topSources)
		if err := metrics.WriteTop(&frame, prev, cur, s.ProgramID, top); err != nil {
			return err
		}
		if !clear && !once {
			frame.WriteString("\n")
		}
		// One write per frame, so a slow SSH link never shows half a frame
		// over the cleared screen for long.
		if _, err := w.Write(frame.Bytes()); err != nil {
			return err
		}
		if once {
			return nil
		}
		prev = cur
	}
}

// isTerminal: w is a terminal, where redrawing in place makes sense.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
