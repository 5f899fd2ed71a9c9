// SPDX-License-Identifier: Apache-2.0

package droplog

import (
	"io"
	"os"
	"time"
)

// backlog bounds the lines waiting for the output: at the default cap of
// 100 lines/s, ten seconds of a stalled disk or a full pipe.
const backlog = 1024

// sink writes lines from a bounded queue in its own goroutine: the reader
// never waits for the output. What does not fit is refused, and counted.
type sink struct {
	out     io.Writer
	closer  io.Closer // nil for stdout
	queue   chan []byte
	done    chan struct{}
	written func() // counts a line written
	failed  func() // counts a line the output refused
}

func newSink(out io.Writer, closer io.Closer, written, failed func()) *sink {
	s := &sink{out: out, closer: closer, queue: make(chan []byte, backlog), done: make(chan struct{}),
		written: written, failed: failed}
	go s.run()
	return s
}

func (s *sink) run() {
	defer close(s.done)
	for b := range s.queue {
		if _, err := s.out.Write(b); err != nil {
			s.failed()
			continue
		}
		s.written()
	}
}

// offer queues a line; false when the queue is full.
func (s *sink) offer(b []byte) bool {
	select {
	case s.queue <- b:
		return true
	default:
		return false
	}
}

// offerBy queues a line, waiting until deadline for room; false when the
// queue stayed full.
func (s *sink) offerBy(b []byte, deadline time.Time) bool {
	if s.offer(b) {
		return true
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case s.queue <- b:
		return true
	case <-t.C:
		return false
	}
}

// close writes what is queued, waiting at most wait for an output that
// blocks, then closes a file output.
func (s *sink) close(wait time.Duration) error {
	close(s.queue)
	select {
	case <-s.done:
	case <-time.After(wait):
	}
	if s.closer != nil {
		return s.closer.Close()
	}
	return nil
}

// Open opens where lines go: "" or "-" is stdout; anything else a file,
// created if missing (mode 0640: drop logs name addresses) and appended to,
// so that logrotate's copytruncate and several runs keep every line.
func Open(path string) (io.Writer, io.Closer, error) {
	if path == "" || path == "-" {
		return os.Stdout, nil, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, nil, err
	}
	return f, f, nil
}
