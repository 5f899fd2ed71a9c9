// SPDX-License-Identifier: Apache-2.0

package container

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// agentSpec is the DaemonSet's agent container, read from
// deploy/kubernetes: the container test runs what the DaemonSet runs.
func agentSpec(t *testing.T) (corev1.PodSpec, corev1.Container) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "kubernetes", "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(data, &ds); err != nil {
		t.Fatalf("daemonset.yaml: %v", err)
	}
	spec := ds.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		t.Fatalf("daemonset.yaml: %d containers", len(spec.Containers))
	}
	return spec, spec.Containers[0]
}

// node is where a container runs: the network namespace it is given in
// place of the host's, the interface and address that stand for the
// node's, and the directories that stand for the host paths the DaemonSet
// mounts: the policy (the ConfigMap) and the run directory. bpffs is the
// host's own, as on a node.
type node struct {
	netnsPath, iface, hostIP string
	policyDir, runDir        string
}

// runArgs turns the DaemonSet's container into `podman run` arguments: its
// capabilities (all others dropped), its security settings, its mounts
// and its arguments, with $(VAR) expanded as the kubelet expands them.
func runArgs(t *testing.T, spec corev1.PodSpec, c corev1.Container, n node, name, image string) []string {
	t.Helper()
	args := []string{"run", "--detach", "--name", name, "--network", "ns:" + n.netnsPath, "--cap-drop", "all"}
	sc := c.SecurityContext
	for _, capability := range sc.Capabilities.Add {
		args = append(args, "--cap-add", "CAP_"+string(capability))
	}
	if sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeUnconfined {
		args = append(args, "--security-opt", "seccomp=unconfined")
	}
	if sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		args = append(args, "--read-only")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Fatal("the DaemonSet's container is privileged")
	}
	if sc.RunAsUser != nil {
		args = append(args, "--user", strconv.FormatInt(*sc.RunAsUser, 10))
	}
	args = append(args, mountArgs(t, spec, c, n)...)
	args = append(args, ulimits(t)...)
	args = append(args, image)
	env := map[string]string{"HOST_IP": n.hostIP, "XDPLIMIT_INTERFACE": n.iface}
	for _, a := range c.Args {
		for k, v := range env {
			a = strings.ReplaceAll(a, "$("+k+")", v)
		}
		if strings.Contains(a, "$(") {
			t.Fatalf("argument %q: a variable the test does not stand in for", a)
		}
		args = append(args, a)
	}
	return args
}

// mountArgs binds the test's stand-ins at the DaemonSet's mount points.
func mountArgs(t *testing.T, spec corev1.PodSpec, c corev1.Container, n node) []string {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	var args []string
	for _, m := range c.VolumeMounts {
		v := vols[m.Name]
		var src string
		switch {
		case v.HostPath != nil && v.HostPath.Path == "/sys/fs/bpf":
			src = "/sys/fs/bpf"
		case v.HostPath != nil && v.HostPath.Path == "/run/xdplimit":
			src = n.runDir
		case v.ConfigMap != nil:
			src = n.policyDir
		default:
			t.Fatalf("the DaemonSet mounts %s (%+v): the test has no stand-in for it", m.Name, v.VolumeSource)
		}
		opt := ""
		if m.ReadOnly {
			opt = ":ro"
		}
		args = append(args, "--volume", src+":"+m.MountPath+opt)
	}
	return args
}

// configMap writes files into dir the way the kubelet updates a ConfigMap
// volume: a new directory ..YYYY_MM_DD_HH_MM_SS.N holding the files, a
// link ..data_tmp to it renamed over ..data in one step, a link NAME ->
// ..data/NAME for each file (made once), then the previous directory
// removed. No file the agent reads is ever written in place.
func configMap(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	ts, err := os.MkdirTemp(dir, time.Now().UTC().Format("..2006_01_02_15_04_05."))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ts, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(ts, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			t.Fatal(err)
		}
	}
	if old != "" {
		if err := os.RemoveAll(filepath.Join(dir, old)); err != nil {
			t.Fatal(err)
		}
	}
}
