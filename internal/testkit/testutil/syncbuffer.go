// SPDX-License-Identifier: Apache-2.0

package testutil

import (
	"bytes"
	"sync"
)

// SyncBuffer is a bytes.Buffer that a process's output (or a logger) can
// write from one goroutine while the test reads it from another.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
