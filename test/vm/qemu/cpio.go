// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"
)

// cpioWriter writes the "newc" (SVR4, no CRC) cpio format, the only one the
// kernel unpacks as an initramfs. It is written here rather than piping a file
// list through cpio(1) because an initramfs needs entries the host cannot
// easily have on disk as an unprivileged user (the /dev/console device node,
// root ownership), and because the archive can then be streamed straight from
// the source files without a staging directory.
type cpioWriter struct {
	w     io.Writer
	ino   uint32
	mtime uint32
	dirs  map[string]bool
}

func newCPIOWriter(w io.Writer) *cpioWriter {
	return &cpioWriter{w: w, ino: 1, mtime: uint32(time.Now().Unix()), dirs: map[string]bool{}}
}

const (
	modeDir     = 0o040000
	modeFile    = 0o100000
	modeSymlink = 0o120000
	modeCharDev = 0o020000
)

// header writes one entry header and its name. The kernel requires every
// field, including the name size, as 8 hex digits, and pads name and data to
// 4-byte boundaries measured from the start of the header.
func (c *cpioWriter) header(name string, mode uint32, size int64, rdevMajor, rdevMinor uint32) error {
	nlink := uint32(1)
	if mode&0o170000 == modeDir {
		nlink = 2
	}
	if size > 0xffffffff {
		return fmt.Errorf("cpio: %s is %d bytes, newc is limited to 4 GiB", name, size)
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, c.mtime, uint32(size), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.ino++
	if _, err := io.WriteString(c.w, hdr+name+"\x00"); err != nil {
		return err
	}
	return c.pad(int64(len(hdr) + len(name) + 1))
}

func (c *cpioWriter) pad(n int64) error {
	if r := n % 4; r != 0 {
		_, err := c.w.Write(make([]byte, 4-r))
		return err
	}
	return nil
}

// mkdirAll adds name and every missing parent: the kernel's unpacker does not
// create parent directories itself.
func (c *cpioWriter) mkdirAll(name string) error {
	name = strings.Trim(path.Clean(name), "/")
	if name == "" || name == "." || c.dirs[name] {
		return nil
	}
	if err := c.mkdirAll(path.Dir(name)); err != nil {
		return err
	}
	c.dirs[name] = true
	return c.header(name, modeDir|0o755, 0, 0, 0)
}

// bytesFile adds a regular file with the given content.
func (c *cpioWriter) bytesFile(name string, perm uint32, data []byte) error {
	name = strings.Trim(name, "/")
	if err := c.mkdirAll(path.Dir(name)); err != nil {
		return err
	}
	if err := c.header(name, modeFile|perm, int64(len(data)), 0, 0); err != nil {
		return err
	}
	if _, err := c.w.Write(data); err != nil {
		return err
	}
	return c.pad(int64(len(data)))
}

// hostFile streams a file from the host into the archive.
func (c *cpioWriter) hostFile(name string, perm uint32, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	name = strings.Trim(name, "/")
	if err := c.mkdirAll(path.Dir(name)); err != nil {
		return err
	}
	if err := c.header(name, modeFile|perm, st.Size(), 0, 0); err != nil {
		return err
	}
	n, err := io.Copy(c.w, f)
	if err != nil {
		return err
	}
	if n != st.Size() {
		return fmt.Errorf("cpio: %s changed size while being archived", src)
	}
	return c.pad(n)
}

// symlink adds name pointing at target; the target is the entry's data.
func (c *cpioWriter) symlink(name, target string) error {
	name = strings.Trim(name, "/")
	if err := c.mkdirAll(path.Dir(name)); err != nil {
		return err
	}
	if err := c.header(name, modeSymlink|0o777, int64(len(target)), 0, 0); err != nil {
		return err
	}
	if _, err := io.WriteString(c.w, target); err != nil {
		return err
	}
	return c.pad(int64(len(target)))
}

// charDev adds a character device node.
func (c *cpioWriter) charDev(name string, perm, major, minor uint32) error {
	name = strings.Trim(name, "/")
	if err := c.mkdirAll(path.Dir(name)); err != nil {
		return err
	}
	return c.header(name, modeCharDev|perm, 0, major, minor)
}

// close writes the trailer entry that ends the archive.
func (c *cpioWriter) close() error {
	return c.header("TRAILER!!!", 0, 0, 0, 0)
}
