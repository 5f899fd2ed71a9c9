// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/spf13/cobra"

	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/maps"
)

func newCaptureCmd() *cobra.Command {
	var (
		file     string
		duration time.Duration
		count    int
	)
	cmd := &cobra.Command{
		Use:   "capture IFACE -w FILE",
		Short: "Write the packets the limiter on IFACE samples to a pcap file",
		Long: `capture writes the packets the datapath samples on IFACE, whatever their verdict,
to FILE as a pcap capture: one in N packets while the policy's capture: section
asks for them (docs/logging.md), each with its frame's first ` + fmt.Sprint(maps.TrafficCap) + ` bytes
(the headers and the start of the payload) and its length. It stops after
--duration, after --count packets, or on Ctrl-C, and says how many it wrote and
how many the rings overwrote before it read them.

Read the file with tcpdump -r, or give it to xdplimit policy suggest --pcap to
find a flood's fingerprint and the rule for it.`,
		Args: cobra.MatchAll(cobra.ExactArgs(1), ifaceNames),
		RunE: func(cmd *cobra.Command, args []string) error {
			if file == "" {
				return fmt.Errorf("-w FILE is required: where the capture goes")
			}
			if duration <= 0 && count <= 0 {
				return fmt.Errorf("give --duration or --count (or both): capture stops at the first")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if duration > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, duration)
				defer cancel()
			}
			return runCapture(ctx, cmd.ErrOrStderr(), args[0], file, count)
		},
	}
	cmd.Flags().StringVarP(&file, "write", "w", "", "the pcap file to write")
	cmd.Flags().DurationVar(&duration, "duration", 10*time.Second, "stop after this long (0: only --count)")
	cmd.Flags().IntVar(&count, "count", 0, "stop after this many packets (0: only --duration)")
	return cmd
}

// captureInterval is how often capture reads the rings: each CPU's holds
// maps.TrafficRingSize samples, so at one in 1024 a CPU may sample ~10
// Mpps before the ring wraps between two reads.
const captureInterval = 100 * time.Millisecond

func runCapture(ctx context.Context, log io.Writer, iface, file string, count int) error {
	s, err := loader.Open(iface)
	if err != nil {
		return err
	}
	defer s.Close()
	oneIn, err := s.Limiter.TrafficSampling()
	if err != nil {
		return err
	}
	if oneIn == 0 {
		return fmt.Errorf("the policy in force on %s samples no packets: add a capture: section "+
			"(capture: {sample: 1/1024}) and reload", iface)
	}
	_, _, cursor, err := s.Limiter.TrafficRing(nil)
	if err != nil {
		return err
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	w := pcapgo.NewWriterNanos(f)
	if err := w.WriteFileHeader(uint32(maps.TrafficCap), layers.LinkTypeEthernet); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", file, err)
	}
	fmt.Fprintf(log, "capturing one in %d packets on %s to %s\n", oneIn, iface, file)
	var wrote, lost int
	tick := time.NewTicker(captureInterval)
	defer tick.Stop()
	for done := false; !done && (count <= 0 || wrote < count); {
		select {
		case <-ctx.Done():
			done = true // a last read below
		case <-tick.C:
		}
		samples, written, next, err := s.Limiter.TrafficRing(cursor)
		if err != nil {
			f.Close()
			return err
		}
		cursor = next
		lost += int(written) - len(samples)
		wall := maps.MonotonicToWall()
		for _, p := range samples {
			if count > 0 && wrote == count {
				break
			}
			ci := gopacket.CaptureInfo{Timestamp: wall(p.At), CaptureLength: len(p.Frame), Length: p.Len}
			if err := w.WritePacket(ci, p.Frame); err != nil {
				f.Close()
				return fmt.Errorf("%s: %w", file, err)
			}
			wrote++
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	fmt.Fprintf(log, "wrote %d packets to %s", wrote, file)
	if lost > 0 {
		fmt.Fprintf(log, "; %d sampled packets were overwritten before they were read", lost)
	}
	fmt.Fprintln(log)
	return nil
}
