package maps

import (
	"strings"

	"github.com/cilium/ebpf"

	"github.com/xdplimit/xdplimit/gen"
)

// Meta is the control plane's bookkeeping stored next to the maps.
type Meta = gen.XdplimitXdplMetadata

func (l *Limiter) Meta() (Meta, error) {
	var m Meta
	err := l.objs.XdplMeta.Lookup(uint32(0), &m)
	return m, err
}

func (l *Limiter) SetMeta(m Meta) error {
	return l.objs.XdplMeta.Update(uint32(0), &m, ebpf.UpdateAny)
}

// SetPolicyInfo records which policy file is in force.
func (l *Limiter) SetPolicyInfo(path string, sha [32]byte) error {
	m, err := l.Meta()
	if err != nil {
		return err
	}
	m.PolicySha256 = sha
	m.PolicyPath = [256]int8{}
	for i := 0; i < len(path) && i < len(m.PolicyPath)-1; i++ {
		m.PolicyPath[i] = int8(path[i])
	}
	return l.SetMeta(m)
}

// PolicyPath decodes the policy path recorded in m.
func PolicyPath(m Meta) string {
	var b strings.Builder
	for _, c := range m.PolicyPath {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}
