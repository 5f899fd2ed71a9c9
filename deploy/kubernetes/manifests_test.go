// SPDX-License-Identifier: Apache-2.0

package kubernetes

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/xdplimit/xdplimit/agent"
	"github.com/xdplimit/xdplimit/loader"
	"github.com/xdplimit/xdplimit/packaging/ociimage"
)

const namespace = "xdplimit"

// kustomization is the part of kustomize's Kustomization these manifests
// use; decoding it strictly refuses any other field.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name   string `json:"name"`
		NewTag string `json:"newTag"`
	} `json:"images"`
}

// decode reads one manifest strictly into v: an unknown field, a field of
// the wrong type or a second YAML document is an error.
func decode(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(data), "# SPDX-License-Identifier: Apache-2.0\n") {
		t.Errorf("%s: no SPDX line first", file)
	}
	if strings.Contains(string(data), "\n---") {
		t.Fatalf("%s: one object a file", file)
	}
	if err := yaml.UnmarshalStrict(data, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// manifests is every object the kustomization applies, decoded.
type manifests struct {
	kust      kustomization
	ns        corev1.Namespace
	sa        corev1.ServiceAccount
	cm        corev1.ConfigMap
	ds        appsv1.DaemonSet
	detachPod corev1.Pod
}

func load(t *testing.T) *manifests {
	t.Helper()
	m := &manifests{}
	decode(t, "kustomization.yaml", &m.kust)
	if m.kust.APIVersion != "kustomize.config.k8s.io/v1beta1" || m.kust.Kind != "Kustomization" {
		t.Errorf("kustomization.yaml: %s %s", m.kust.APIVersion, m.kust.Kind)
	}
	objects := map[string]any{
		"namespace.yaml": &m.ns, "serviceaccount.yaml": &m.sa, "configmap.yaml": &m.cm, "daemonset.yaml": &m.ds,
	}
	var listed []string
	for _, r := range m.kust.Resources {
		if objects[r] == nil {
			t.Fatalf("kustomization.yaml lists %s, which this test does not know", r)
		}
		listed = append(listed, r)
	}
	yamls, _ := filepath.Glob("*.yaml")
	for _, f := range yamls {
		if f != "kustomization.yaml" && !slices.Contains(listed, f) {
			t.Errorf("%s is not in kustomization.yaml's resources", f)
		}
	}
	for f, v := range objects {
		decode(t, f, v)
	}
	decode(t, filepath.Join("tools", "detach.yaml"), &m.detachPod)
	return m
}

func TestObjectsAndNamespace(t *testing.T) {
	m := load(t)
	kinds := []struct {
		got, want, apiVersion, wantAPI string
		ns                             string
	}{
		{m.ns.Kind, "Namespace", m.ns.APIVersion, "v1", ""},
		{m.sa.Kind, "ServiceAccount", m.sa.APIVersion, "v1", m.sa.Namespace},
		{m.cm.Kind, "ConfigMap", m.cm.APIVersion, "v1", m.cm.Namespace},
		{m.ds.Kind, "DaemonSet", m.ds.APIVersion, "apps/v1", m.ds.Namespace},
		{m.detachPod.Kind, "Pod", m.detachPod.APIVersion, "v1", m.detachPod.Namespace},
	}
	for _, k := range kinds {
		if k.got != k.want || k.apiVersion != k.wantAPI {
			t.Errorf("kind %s %s, want %s %s", k.apiVersion, k.got, k.wantAPI, k.want)
		}
		if k.want != "Namespace" && k.ns != namespace {
			t.Errorf("%s in namespace %q, want %q", k.want, k.ns, namespace)
		}
	}
	if m.ns.Name != namespace || m.ns.Labels["pod-security.kubernetes.io/enforce"] != "privileged" {
		t.Errorf("namespace %q labels %v: want %s, admitted at the privileged level", m.ns.Name, m.ns.Labels, namespace)
	}
	spec := m.ds.Spec.Template.Spec
	if spec.ServiceAccountName != m.sa.Name || m.sa.AutomountServiceAccountToken == nil ||
		*m.sa.AutomountServiceAccountToken || spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("service account %q (want %q) with its token mounted", spec.ServiceAccountName, m.sa.Name)
	}
	sel := m.ds.Spec.Selector
	if sel == nil || len(sel.MatchLabels) == 0 {
		t.Fatal("the DaemonSet has no selector")
	}
	for k, v := range sel.MatchLabels {
		if m.ds.Spec.Template.Labels[k] != v {
			t.Errorf("the selector's %s=%s is not on the pod template", k, v)
		}
	}
	u := m.ds.Spec.UpdateStrategy
	if u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate == nil || u.RollingUpdate.MaxSurge == nil ||
		u.RollingUpdate.MaxSurge.IntValue() != 0 {
		t.Errorf("update strategy %+v: want a rolling update without surge (one agent per interface lock)", u)
	}
}

// agentContainer is the DaemonSet's one container.
func agentContainer(t *testing.T, m *manifests) corev1.Container {
	t.Helper()
	cs := m.ds.Spec.Template.Spec.Containers
	if len(cs) != 1 || len(m.ds.Spec.Template.Spec.InitContainers) != 0 {
		t.Fatalf("%d containers, want the agent alone", len(cs))
	}
	return cs[0]
}

// checkSecurity: the exact capability set, nothing privileged.
func checkSecurity(t *testing.T, what string, c corev1.Container) {
	t.Helper()
	sc := c.SecurityContext
	if sc == nil || sc.Capabilities == nil {
		t.Fatalf("%s: no securityContext with capabilities", what)
	}
	if sc.Privileged == nil || *sc.Privileged {
		t.Errorf("%s: privileged is %v, want false, said explicitly", what, sc.Privileged)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation is not false", what)
	}
	if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("%s: the root file system is writable", what)
	}
	var add, drop []string
	for _, c := range sc.Capabilities.Add {
		add = append(add, string(c))
	}
	for _, c := range sc.Capabilities.Drop {
		drop = append(drop, string(c))
	}
	slices.Sort(add)
	if !slices.Equal(add, Capabilities) || !slices.Equal(drop, []string{"ALL"}) {
		t.Errorf("%s: capabilities add %v drop %v, want add %v drop [ALL]", what, add, drop, Capabilities)
	}
}

// Capabilities is the set the agent runs with, as the container test
// (test/container) gives them to podman.
var Capabilities = []string{"BPF", "NET_ADMIN", "PERFMON"}

func TestDaemonSetSecurity(t *testing.T) {
	m := load(t)
	spec := m.ds.Spec.Template.Spec
	if !spec.HostNetwork {
		t.Error("hostNetwork is off: XDP would attach in the pod's own namespace")
	}
	if spec.HostPID || spec.HostIPC {
		t.Error("hostPID or hostIPC: the agent needs neither")
	}
	c := agentContainer(t, m)
	checkSecurity(t, "the agent", c)
	checkSecurity(t, "the detach pod", m.detachPod.Spec.Containers[0])
	if g := spec.TerminationGracePeriodSeconds; g == nil || *g < 10 {
		t.Errorf("terminationGracePeriodSeconds %v: the agent's stop (fleet release, scrapes in flight) needs up to 10 s", g)
	}
	if slices.Contains(c.Args, "--detach-on-exit") {
		t.Error("--detach-on-exit: every pod restart would leave the interface unprotected")
	}
}

// checkMounts: the host's bpffs and run directory, where the loader puts
// pins and locks, mounted at the same paths.
func checkMounts(t *testing.T, what string, spec corev1.PodSpec, c corev1.Container) map[string]corev1.Volume {
	t.Helper()
	vols := map[string]corev1.Volume{}
	for _, v := range spec.Volumes {
		vols[v.Name] = v
	}
	host := map[string]string{}
	for _, vm := range c.VolumeMounts {
		v, ok := vols[vm.Name]
		if !ok {
			t.Errorf("%s mounts %s, which is no volume", what, vm.Name)
			continue
		}
		if v.HostPath != nil {
			host[vm.MountPath] = v.HostPath.Path
		}
		if vm.MountPropagation != nil && *vm.MountPropagation == corev1.MountPropagationBidirectional {
			t.Errorf("%s: bidirectional propagation on %s needs a privileged container", what, vm.MountPath)
		}
	}
	for _, p := range []string{loader.BPFFS, loader.RunDir()} {
		if host[p] != p {
			t.Errorf("%s: %s is mounted from the host's %q, want the host's %s", what, p, host[p], p)
		}
	}
	return vols
}

// arg returns the value of --name=VALUE in args.
func arg(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func TestDaemonSetPolicyAndMounts(t *testing.T) {
	m := load(t)
	c := agentContainer(t, m)
	vols := checkMounts(t, "the agent", m.ds.Spec.Template.Spec, c)
	checkMounts(t, "the detach pod", m.detachPod.Spec, m.detachPod.Spec.Containers[0])
	if len(c.Args) < 2 || c.Args[0] != "attach" || c.Args[1] != "$(XDPLIMIT_INTERFACE)" || len(c.Command) != 0 {
		t.Fatalf("command %q args %q: want the image's entrypoint with attach $(XDPLIMIT_INTERFACE)", c.Command, c.Args)
	}
	if !envNamed(c, "XDPLIMIT_INTERFACE") {
		t.Error("XDPLIMIT_INTERFACE is not set")
	}
	if !slices.Contains(c.Args, "--watch") {
		t.Error("no --watch: a ConfigMap edit would never be applied")
	}
	policy, ok := arg(c.Args, "policy")
	if !ok {
		t.Fatal("no --policy=PATH")
	}
	var mounted *corev1.VolumeMount
	for i, vm := range c.VolumeMounts {
		if v := vols[vm.Name]; v.ConfigMap != nil && v.ConfigMap.Name == m.cm.Name {
			mounted = &c.VolumeMounts[i]
		}
	}
	// The whole ConfigMap as a directory: a subPath mount is never updated.
	if mounted == nil || mounted.SubPath != "" || mounted.MountPath != filepath.Dir(policy) || !mounted.ReadOnly {
		t.Fatalf("the ConfigMap %s is not mounted read-only as the directory of %s: %+v", m.cm.Name, policy, mounted)
	}
	text, ok := m.cm.Data[filepath.Base(policy)]
	if !ok {
		t.Fatalf("the ConfigMap has no %s", filepath.Base(policy))
	}
	// The policy passes the check attach runs.
	path := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := agent.CompilePolicy(path, io.Discard); err != nil {
		t.Errorf("the ConfigMap's policy: %v", err)
	}
}

func envNamed(c corev1.Container, name string) bool {
	for _, e := range c.Env {
		if e.Name == name && (e.Value != "" || e.ValueFrom != nil) {
			return true
		}
	}
	return false
}

func TestImageMatchesMakeImage(t *testing.T) {
	m := load(t)
	for what, c := range map[string]corev1.Container{
		"the agent": agentContainer(t, m), "the detach pod": m.detachPod.Spec.Containers[0],
	} {
		repo, tag, ok := strings.Cut(c.Image, ":")
		if !ok || repo != ociimage.Repository || tag == "" {
			t.Errorf("%s runs %q, want %s:TAG (make image)", what, c.Image, ociimage.Repository)
		}
		// A loaded image (podman load, ctr import) is never pulled.
		if c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("%s: imagePullPolicy %q, want IfNotPresent", what, c.ImagePullPolicy)
		}
	}
	if len(m.kust.Images) != 1 || m.kust.Images[0].Name != ociimage.Repository {
		t.Errorf("kustomization images %+v: want the one entry %s", m.kust.Images, ociimage.Repository)
	}
}

func TestProbesAndScrapeUseTheMetricsPort(t *testing.T) {
	m := load(t)
	c := agentContainer(t, m)
	addr, ok := arg(c.Args, "metrics-addr")
	if !ok {
		t.Fatal("no --metrics-addr=ADDR: the default, loopback, is out of reach of the probes and Prometheus")
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "$(HOST_IP)" || !envNamed(c, "HOST_IP") {
		t.Fatalf("--metrics-addr=%s: want $(HOST_IP):PORT, HOST_IP from the downward API (%v)", addr, err)
	}
	var named string
	for _, p := range c.Ports {
		if strconv.Itoa(int(p.ContainerPort)) == port {
			named = p.Name
		}
	}
	if named == "" {
		t.Fatalf("no container port %s", port)
	}
	probes := map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe}
	for what, p := range probes {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("no %s probe over HTTP", what)
			continue
		}
		if p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != named || p.HTTPGet.Host != "" {
			t.Errorf("%s probe GET %s on %s (host %q): want /healthz on port %s", what, p.HTTPGet.Path,
				p.HTTPGet.Port.String(), p.HTTPGet.Host, named)
		}
	}
	ann := m.ds.Spec.Template.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != port || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("scrape annotations %v: want port %s, /metrics", ann, port)
	}
}
