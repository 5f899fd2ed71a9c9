// SPDX-License-Identifier: Apache-2.0

// Package fileutil reads configuration files defensively. Production uses
// it for every file an operator names: the policy and its list files
// (policy), the Redis password file (fleet) and the files the policy watcher
// compares (internal/watch).
package fileutil

import (
	"fmt"
	"io"
	"os"
	"syscall"
)

// ReadRegular reads a regular file of at most limit bytes. The non-blocking
// open and the fstat keep a path naming a FIFO (which a plain open would
// block on until a writer comes) or a device such as /dev/zero from hanging
// the caller; the limit keeps a huge file from exhausting memory.
func ReadRegular(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
}
