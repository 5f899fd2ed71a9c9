// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// accelEnv forces the accelerator, skipping the probe.
const accelEnv = "XDPLIMIT_VM_ACCEL"

// accelFromEnv returns the accelerator forced by the environment, or "".
func accelFromEnv() (string, error) {
	switch v := os.Getenv(accelEnv); v {
	case "", "kvm", "tcg":
		return v, nil
	default:
		return "", fmt.Errorf("%s=%q: want kvm or tcg", accelEnv, v)
	}
}

// kvmProbeTimeout bounds the probe boot. Under working KVM the probe reaches
// init in about a second; under TCG in ~2 s; a nested-KVM hang never does.
const kvmProbeTimeout = 20 * time.Second

// chooseAccel decides between KVM and TCG and says why.
//
// /dev/kvm existing proves little: on this project's nested VMs qemu with KVM
// either aborts at once (setting MSR 0x10a with -cpu host) or hangs in the
// firmware without a byte of output. So KVM is used only after a probe boot
// of the real kernel reached userspace; the verdict is cached in
// <cache>/kvm-ok, keyed by host kernel and qemu version, because a failed
// probe costs its whole timeout.
func chooseAccel(ctx context.Context, cacheDir string, k *kernel, busybox string, applets []string) (accel, why string, err error) {
	if forced, err := accelFromEnv(); err != nil || forced != "" {
		return forced, accelEnv + "=" + forced, err
	}
	if !guest.native() {
		return "tcg", "an " + guest.Name + " guest on an " + runtime.GOARCH + " host", nil
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return "tcg", "no usable /dev/kvm: " + err.Error(), nil
	}
	f.Close()

	key, err := probeKey()
	if err != nil {
		return "", "", err
	}
	cache := filepath.Join(cacheDir, "kvm-ok")
	if b, err := os.ReadFile(cache); err == nil {
		verdict, cachedKey, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		if cachedKey == key {
			if verdict == "ok" {
				return "kvm", "KVM probe passed earlier (" + cache + ")", nil
			}
			return "tcg", "KVM probe failed earlier (" + cache + "; delete it to probe again)", nil
		}
	}

	ok, detail, err := probeKVM(ctx, cacheDir, k, busybox, applets)
	if err != nil {
		return "", "", err
	}
	verdict := "fail"
	if ok {
		verdict = "ok"
	}
	tmp := fmt.Sprintf("%s.tmp%d", cache, os.Getpid())
	if err := os.WriteFile(tmp, []byte(verdict+" "+key+"\n"), 0o644); err != nil {
		return "", "", err
	}
	if err := os.Rename(tmp, cache); err != nil {
		return "", "", err
	}
	if ok {
		return "kvm", "KVM probe boot passed: " + detail, nil
	}
	return "tcg", "KVM probe boot failed: " + detail, nil
}

// probeKey identifies what the probe verdict depends on: the host kernel (the
// nested-virtualisation support) and the qemu build.
func probeKey() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", err
	}
	out, err := exec.Command(guest.QEMU, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w (Debian package %s)", guest.QEMU, err, guest.Package)
	}
	qv, _, _ := strings.Cut(string(out), "\n")
	return strings.ReplaceAll(unix.ByteSliceToString(u.Release[:])+"|"+strings.TrimSpace(qv), " ", "_"), nil
}

// probeKVM boots the kernel under KVM with an init that only prints a marker.
// Its console goes to <cache>/kvm-probe.log, not to stdout: a failure here is
// expected on nested hosts and is not a test failure.
func probeKVM(ctx context.Context, cacheDir string, k *kernel, busybox string, applets []string) (bool, string, error) {
	tmp, err := os.MkdirTemp("", "xdplimit-kvm-probe-")
	if err != nil {
		return false, "", err
	}
	defer os.RemoveAll(tmp)
	marker := newMarker()
	initrd := filepath.Join(tmp, "probe.cpio.gz")
	if err := buildProbeInitramfs(initrd, busybox, applets, marker); err != nil {
		return false, "", err
	}
	logPath := filepath.Join(cacheDir, "kvm-probe.log")
	log, err := os.Create(logPath)
	if err != nil {
		return false, "", err
	}
	defer log.Close()
	args := qemuArgs(vmConfig{Kernel: k.Vmlinuz, Initrd: initrd, Accel: "kvm", MemoryMB: 256, SMP: 1})
	res, err := runQEMU(ctx, runSpec{Args: args, Out: log, Marker: marker, Timeout: kvmProbeTimeout, FinalKind: "PROBE-OK"})
	if err != nil {
		return false, "", fmt.Errorf("KVM probe: %w", err)
	}
	if res.Interrupted {
		return false, "", context.Cause(ctx)
	}
	if ev, ok := res.find("PROBE-OK"); ok {
		return true, fmt.Sprintf("userspace after %.1fs", ev.At.Seconds()), nil
	}
	if res.TimedOut {
		return false, fmt.Sprintf("no userspace within %v (see %s)", kvmProbeTimeout, logPath), nil
	}
	return false, fmt.Sprintf("qemu exited without reaching userspace: %v (see %s)", res.WaitErr, logPath), nil
}
