// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
)

// One attach process runs per interface, and one of them holds the
// metrics address: it serves its own series and those of every other
// attach configured with the same address, which it gathers from their
// control sockets (Peer). Each process's series are told apart by their
// interface label, which the Go runtime and process collectors and the
// handler's own counter lack: they get the process's interface here.

// labelInterface gives every series without an interface label the label
// iface.
func labelInterface(fams []*dto.MetricFamily, iface string) {
	for _, mf := range fams {
		for _, m := range mf.GetMetric() {
			if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "interface" }) {
				m.Label = append(m.Label, &dto.LabelPair{Name: proto.String("interface"), Value: proto.String(iface)})
				slices.SortFunc(m.Label, func(a, b *dto.LabelPair) int { return cmp.Compare(a.GetName(), b.GetName()) })
			}
		}
	}
}

// merge joins sets of metric families by name, sorted. A family whose type
// differs from the first of its name (two xdplimit versions during an
// upgrade) is left out and reported in err; so is a series that is already
// there.
func merge(sets ...[]*dto.MetricFamily) (out []*dto.MetricFamily, err error) {
	byName := map[string]*dto.MetricFamily{}
	seen := map[string]bool{}
	var errs []error
	for _, set := range sets {
		for _, mf := range set {
			have, ok := byName[mf.GetName()]
			if !ok {
				have = &dto.MetricFamily{Name: mf.Name, Help: mf.Help, Type: mf.Type, Unit: mf.Unit}
				byName[mf.GetName()] = have
			} else if have.GetType() != mf.GetType() {
				errs = append(errs, fmt.Errorf("%s: %v here, %v elsewhere: left out", mf.GetName(), mf.GetType(), have.GetType()))
				continue
			}
			for _, m := range mf.GetMetric() {
				key := seriesKey(mf.GetName(), m)
				if seen[key] {
					errs = append(errs, fmt.Errorf("%s: served twice", key))
					continue
				}
				seen[key] = true
				have.Metric = append(have.Metric, m)
			}
		}
	}
	for _, mf := range byName {
		out = append(out, mf)
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return cmp.Compare(a.GetName(), b.GetName()) })
	return out, errors.Join(errs...)
}

func seriesKey(name string, m *dto.Metric) string {
	var b strings.Builder
	b.WriteString(name)
	for _, l := range m.GetLabel() {
		fmt.Fprintf(&b, ",%s=%q", l.GetName(), l.GetValue())
	}
	return b.String()
}

// unreachable is what stands for a peer whose series could not be
// gathered: xdplimit_up 0, as for maps that cannot be read, so that the
// alert on it fires.
func unreachable(iface string) []*dto.MetricFamily {
	m := prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, 0, iface)
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		return nil
	}
	return []*dto.MetricFamily{{Name: proto.String(namespace + "_up"), Type: dto.MetricType_GAUGE.Enum(),
		Help: proto.String(upHelp), Metric: []*dto.Metric{&pb}}}
}
