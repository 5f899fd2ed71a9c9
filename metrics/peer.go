// SPDX-License-Identifier: Apache-2.0

package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// Peer is another attach process whose series this exporter serves beside
// its own.
type Peer interface {
	// Interface is the interface the peer serves.
	Interface() string
	// Gather returns the peer's metric families.
	Gather(ctx context.Context) ([]*dto.MetricFamily, error)
	// Health returns why the peer's maps cannot be read (nil: healthy).
	Health(ctx context.Context) error
	// Source returns what the peer's limiters hold for an address
	// (GET /v1/sources/ADDR).
	Source(ctx context.Context, addr netip.Addr, port uint16) ([]SourceReport, error)
}

// Decode reads an exposition in the format its Content-Type header names
// (the text format, or Prometheus' delimited protocol buffers).
func Decode(r io.Reader, contentType string) ([]*dto.MetricFamily, error) {
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	if contentType != "" {
		format = expfmt.Format(contentType)
	}
	dec := expfmt.NewDecoder(r, format)
	var out []*dto.MetricFamily
	for {
		mf := &dto.MetricFamily{}
		err := dec.Decode(mf)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("decoding metrics: %w", err)
		}
		out = append(out, mf)
	}
}

// HTTPPeer is a peer whose LocalHandler answers at URL through Client
// (an attach's control socket).
type HTTPPeer struct {
	Name   string
	Client *http.Client
	URL    string // without the path: "http://xdplimit"
}

// Interface implements Peer.
func (p HTTPPeer) Interface() string { return p.Name }

// Gather implements Peer, asking for protocol buffers: no text to parse
// back, nothing lost on the way.
func (p HTTPPeer) Gather(ctx context.Context) ([]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", string(expfmt.NewFormat(expfmt.TypeProtoDelim)))
	resp, err := p.Client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	return Decode(resp.Body, resp.Header.Get("Content-Type"))
}

// Health implements Peer: the reason its /healthz gives, if any.
func (p HTTPPeer) Health(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := p.Client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	// "unhealthy", then "IFACE: reason": the reason alone.
	_, reason, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	reason = strings.TrimPrefix(reason, p.Name+": ")
	if reason == "" {
		reason = resp.Status
	}
	return errors.New(reason)
}
