// SPDX-License-Identifier: Apache-2.0

// Package smoke checks that the VM test environment built by test/vm/qemu
// provides what the project's XDP tests rely on: a bpffs on /sys/fs/bpf, veth
// pairs created over netlink, and native (driver mode) XDP on veth. It has
// only tests; they run in the VM and, as root, on the host as well.
package smoke
