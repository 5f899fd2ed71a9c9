// SPDX-License-Identifier: Apache-2.0

package policy

import (
	"fmt"

	"github.com/goccy/go-yaml/ast"

	"github.com/xdplimit/xdplimit/model"
)

// Decoding a limit: the algorithm, its rate and burst or its count and
// window, and its scope, each checked against what the datapath can hold
// (the model package is the authority on that).

// limit decodes one limit and checks it against the datapath's ranges.
func (d *decoder) limit(n ast.Node, path string) (Limit, bool) {
	before := len(d.errs)
	var l Limit
	m := d.mapping(n, path, "algorithm", "rate", "burst", "packets", "bytes", "window", "scope")
	if m == nil {
		return l, false
	}
	f, ok := m["algorithm"]
	if !ok {
		d.errorf(n, path, "algorithm is required: %s", orList(algorithmNames))
		return l, false
	}
	// leaky_bucket is read as token_bucket, and listed after the others.
	names := append(algorithmNames[:len(algorithmNames):len(algorithmNames)], leakyBucket)
	alg, ok := d.enum(f.value, join(path, "algorithm"), "algorithm", names)
	if !ok {
		return l, false
	}
	if alg == len(algorithmNames) {
		alg = int(TokenBucket)
	}
	l.Algorithm = Algorithm(alg)
	if l.Algorithm == TokenBucket {
		d.tokenBucket(n, path, m, &l)
	} else {
		d.window(n, path, m, &l)
	}
	if f, ok := m["scope"]; ok {
		l.Scope = d.scope(f, join(path, "scope"), l.Algorithm)
	}
	return l, len(d.errs) == before
}

func (d *decoder) rejectFields(path string, m map[string]field, alg Algorithm, takes string, names ...string) {
	for _, name := range names {
		if f, ok := m[name]; ok {
			d.errorf(f.key, join(path, name), "%s does not take %s; it takes %s", alg, name, takes)
		}
	}
}

func (d *decoder) tokenBucket(n ast.Node, path string, m map[string]field, l *Limit) {
	d.rejectFields(path, m, l.Algorithm, "rate and burst", "packets", "bytes", "window")
	rateOK := false
	if f, ok := m["rate"]; ok {
		fpath := join(path, "rate")
		if s, ok := d.scalar(f.value, fpath, "a rate like 1000/s or 8Mbit/s"); ok {
			r, err := parseRate(s)
			switch {
			case err != nil:
				d.errorf(f.value, fpath, "%v", err)
			case r.check(s) != "":
				d.errorf(f.value, fpath, "%s", r.check(s))
			default:
				l.Unit = r.unit
				l.Count, l.Per = r.countPer()
				rateOK = true
			}
		}
	} else {
		d.errorf(n, path, "rate is required for token_bucket, e.g. rate: 1000/s")
	}
	f, ok := m["burst"]
	if !ok {
		d.errorf(n, path, "burst is required for token_bucket: the most a key may send at once above the rate, e.g. burst: 2000 (packets) or burst: 64KB (byte rates)")
		return
	}
	fpath := join(path, "burst")
	s, ok := d.scalar(f.value, fpath, "a burst size")
	if !ok || !rateOK {
		return
	}
	var burst uint64
	var err error
	if l.Unit == Bytes {
		burst, err = parseByteSize(s)
	} else {
		burst, err = parseCount(s)
		if _, berr := parseByteSize(s); err != nil && berr == nil {
			err = fmt.Errorf("burst %s is a byte size, but the rate counts packets", s)
		}
	}
	switch {
	case err != nil:
		d.errorf(f.value, fpath, "%v", err)
	case burst < 1 || burst > maxBurst:
		d.errorf(f.value, fpath, "burst must be 1 to %d, got %s", uint64(maxBurst), s)
	default:
		// The datapath's own conversion decides what it can hold
		// (a burst that takes years to refill cannot be).
		if _, err := model.TokenBucketParams(l.Count, l.Per, burst, l.Unit == Bytes); err != nil {
			d.errorf(f.value, fpath, "%v", err)
			return
		}
		l.Burst = burst
		if l.Unit == Bytes && burst < 1500 {
			d.warnf(f.value, fpath, "burst %s is less than one 1500-byte packet; larger packets can never conform", s)
		}
	}
}

func (d *decoder) window(n ast.Node, path string, m map[string]field, l *Limit) {
	d.rejectFields(path, m, l.Algorithm, "packets or bytes, and window", "rate", "burst")
	pf, hasP := m["packets"]
	bf, hasB := m["bytes"]
	switch {
	case hasP && hasB:
		d.errorf(bf.key, join(path, "bytes"), "give packets or bytes, not both")
	case hasP:
		fpath := join(path, "packets")
		if s, ok := d.scalar(pf.value, fpath, "a packet count"); ok {
			l.Unit = Packets
			l.Count = d.windowCount(pf.value, fpath, "packets", s, parseCount)
		}
	case hasB:
		fpath := join(path, "bytes")
		if s, ok := d.scalar(bf.value, fpath, "a byte size"); ok {
			l.Unit = Bytes
			l.Count = d.windowCount(bf.value, fpath, "bytes", s, parseByteSize)
		}
	default:
		d.errorf(n, path, "%s needs packets or bytes, e.g. packets: 100", l.Algorithm)
	}
	if l.Algorithm == SlidingLog {
		d.slidingLog(m, path, l)
	}
	if f, ok := m["window"]; ok {
		fpath := join(path, "window")
		if s, ok := d.scalar(f.value, fpath, "a duration"); ok {
			w, err := parseWindow(s)
			if err != nil {
				d.errorf(f.value, fpath, "%v", err)
			}
			l.Window = w
		}
	} else {
		d.errorf(n, path, "window is required for %s, e.g. window: 1s", l.Algorithm)
	}
}

func (d *decoder) windowCount(n ast.Node, path, name, s string, parse func(string) (uint64, error)) uint64 {
	c, err := parse(s)
	switch {
	case err != nil:
		d.errorf(n, path, "%v", err)
	case c < 1 || c > maxWindowCount:
		d.errorf(n, path, "%s must be 1 to %d (2^40-1), got %s", name, uint64(maxWindowCount), s)
	}
	return c
}

// slidingLog checks what a sliding log can hold: packets only, at most
// model.LogMax of them (the log keeps one time per packet).
func (d *decoder) slidingLog(m map[string]field, path string, l *Limit) {
	if f, ok := m["bytes"]; ok {
		d.errorf(f.key, join(path, "bytes"), "sliding_log counts packets, not bytes (it logs each admission's time); use sliding_window for a byte limit")
	}
	if f, ok := m["packets"]; ok && l.Unit == Packets && l.Count > model.LogMax {
		d.errorf(f.value, join(path, "packets"), "sliding_log holds at most %d packets per window, got %d; use sliding_window or token_bucket for larger limits", model.LogMax, l.Count)
	}
}
