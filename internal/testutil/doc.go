// Package testutil holds the helpers every xdplimit test package shares:
// feature gates that cannot hide a test forever in CI, and testing.TB
// wrappers around internal/netns (named network namespaces and veth pairs
// deleted by the test's cleanup, SNMP counter snapshots) and
// internal/command (a bounded runner for external commands).
package testutil
