// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
)

// ErrNoAgent means no agent answers on an interface's control socket: none
// runs (the socket is missing, or a killed agent's is left).
var ErrNoAgent = errors.New("no attach process runs")

// controlURL is the base URL of requests over a control socket; the host
// is a placeholder, the dialer ignores it.
const controlURL = "http://xdplimit"

// controlClient talks HTTP over the control socket at path. Each request
// dials anew: clients are short-lived, and a peer may be gone by the next
// scrape.
func controlClient(path string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "unix", path)
			if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
				return nil, fmt.Errorf("%w (%s)", ErrNoAgent, path)
			}
			return c, err
		},
	}}
}

// askJSON sends a request over the control socket at path and decodes the
// JSON answer into v, whatever its status.
func askJSON(ctx context.Context, path, method, what string, v any) error {
	req, err := http.NewRequestWithContext(ctx, method, controlURL+what, nil)
	if err != nil {
		return err
	}
	resp, err := controlClient(path).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(v); err != nil {
		return fmt.Errorf("%s %s: %s, %w", method, what, resp.Status, err)
	}
	return nil
}

// AskInfo asks the agent of iface who it is; ErrNoAgent when none runs.
func AskInfo(ctx context.Context, iface string) (Info, error) {
	var i Info
	err := askJSON(ctx, ControlSocket(iface), http.MethodGet, "/info", &i)
	return i, err
}

// AskReload asks the agent of iface to reload its policy and waits (until
// ctx ends) for the result; ErrNoAgent when none runs.
func AskReload(ctx context.Context, iface string) (ReloadResult, error) {
	var r ReloadResult
	err := askJSON(ctx, ControlSocket(iface), http.MethodPost, "/reload", &r)
	return r, err
}

// AskAutopilot asks the agent of iface for its autopilot's rules and
// attacks; ErrNoAgent when none runs.
func AskAutopilot(ctx context.Context, iface string) (AutopilotView, error) {
	var v struct {
		AutopilotView
		Error string `json:"error"`
	}
	if err := askJSON(ctx, ControlSocket(iface), http.MethodGet, "/v1/autopilot", &v); err != nil {
		return AutopilotView{}, err
	}
	if v.Error != "" {
		return AutopilotView{}, errors.New(v.Error)
	}
	return v.AutopilotView, nil
}

// AskAutopilotKeep keeps the generated rule name past its attack, and
// AskAutopilotRemove removes it; either returns the rule.
func AskAutopilotKeep(ctx context.Context, iface, name string) (AutopilotRule, error) {
	return askAutopilotRule(ctx, iface, http.MethodPost, name, "/keep")
}

func AskAutopilotRemove(ctx context.Context, iface, name string) (AutopilotRule, error) {
	return askAutopilotRule(ctx, iface, http.MethodDelete, name, "")
}

func askAutopilotRule(ctx context.Context, iface, method, name, verb string) (AutopilotRule, error) {
	var v struct {
		AutopilotRule
		Error string `json:"error"`
	}
	err := askJSON(ctx, ControlSocket(iface), method, "/v1/autopilot/rules/"+url.PathEscape(name)+verb, &v)
	if err == nil && v.Error != "" {
		err = errors.New(v.Error)
	}
	return v.AutopilotRule, err
}
