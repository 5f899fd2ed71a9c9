// SPDX-License-Identifier: Apache-2.0

// Package kubernetes holds the manifests that run xdplimit as a DaemonSet
// (docs/kubernetes.md) and, in its test, their validation: every manifest
// decoded strictly into the Kubernetes API's own types (an unknown or
// misspelt field fails, as the API server would refuse it), and the
// settings the agent depends on checked against the code they must agree
// with: the image make image builds, the bpffs and run directories the
// loader uses, the policy the ConfigMap carries, the metrics port the
// probes and the scrape annotations name. No Go code here ships.
package kubernetes
