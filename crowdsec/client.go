// SPDX-License-Identifier: Apache-2.0

package crowdsec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// ErrorKind classifies a failed poll, for metrics and logs.
type ErrorKind string

const (
	KindConnect  ErrorKind = "connect"   // no connection (LAPI down, refused, DNS)
	KindTimeout  ErrorKind = "timeout"   // no whole answer within Config.Timeout
	KindAuth     ErrorKind = "auth"      // 401 or 403: the API key was refused
	KindStatus   ErrorKind = "status"    // any other status than 200
	KindTooLarge ErrorKind = "too_large" // the answer exceeded MaxBytes
	KindTooMany  ErrorKind = "too_many"  // the answer exceeded MaxDecisions
	KindDecode   ErrorKind = "decode"    // not the JSON of a stream answer
	KindCanceled ErrorKind = "canceled"  // the caller's context ended
	KindTarget   ErrorKind = "target"    // the Target failed: the ban table could not be read or written
)

// ErrorKinds lists every kind, for metrics that show zeros.
var ErrorKinds = []ErrorKind{KindConnect, KindTimeout, KindAuth, KindStatus, KindTooLarge, KindTooMany, KindDecode, KindCanceled, KindTarget}

// PollError is a poll that applied nothing.
type PollError struct {
	Kind ErrorKind
	Err  error
}

func (e *PollError) Error() string { return fmt.Sprintf("crowdsec: %s: %v", e.Kind, e.Err) }
func (e *PollError) Unwrap() error { return e.Err }

func pollErr(kind ErrorKind, format string, args ...any) *PollError {
	return &PollError{kind, fmt.Errorf(format, args...)}
}

// newHTTPClient refuses redirects: the key travels in a header that Go
// would forward to wherever a redirect points.
func newHTTPClient() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// fetch asks the LAPI for the stream: everything (startup) or what changed
// since this key's last poll.
func (b *Bouncer) fetch(ctx context.Context, startup bool) (*Stream, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	u := strings.TrimRight(b.cfg.URL, "/") + "/v1/decisions/stream?" + b.cfg.query(startup).Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, pollErr(KindConnect, "%v", err)
	}
	req.Header.Set("X-Api-Key", b.cfg.APIKey)
	req.Header.Set("User-Agent", b.cfg.UserAgent)
	req.Header.Set("Accept", "application/json")
	resp, err := b.http.Do(req)
	if err != nil {
		return nil, classify(ctx, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, pollErr(KindAuth, "the LAPI refused the API key (%s: %s): check it against cscli bouncers list",
			resp.Status, snippet(resp.Body))
	case resp.StatusCode != http.StatusOK:
		return nil, pollErr(KindStatus, "%s: %s", resp.Status, snippet(resp.Body))
	case resp.ContentLength > b.cfg.MaxBytes:
		return nil, pollErr(KindTooLarge, "%d bytes announced, limit %d", resp.ContentLength, b.cfg.MaxBytes)
	}
	body := &errRecorder{r: resp.Body}
	s, err := DecodeStream(body, b.cfg.MaxBytes, b.cfg.MaxDecisions)
	switch {
	case err == nil:
		return s, nil
	case errors.Is(err, ErrTooLarge):
		return nil, pollErr(KindTooLarge, "answer over %d bytes", b.cfg.MaxBytes)
	case errors.Is(err, ErrTooMany):
		return nil, &PollError{KindTooMany, err}
	case ctx.Err() != nil:
		return nil, classify(ctx, err)
	}
	// A connection that broke mid-answer is a connection failure; a
	// truncated or garbled body that arrived whole is the answer's fault.
	// The JSON decoder says "unexpected EOF" for both: what the body
	// reader itself returned tells them apart.
	if body.err != nil {
		return nil, classify(ctx, body.err)
	}
	return nil, pollErr(KindDecode, "%v", err)
}

// errRecorder keeps the first error other than EOF its reader returned.
type errRecorder struct {
	r   io.Reader
	err error
}

func (e *errRecorder) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// classify says whether a transport error is the caller's cancellation,
// our timeout, or a connection failure.
func classify(ctx context.Context, err error) *PollError {
	var ne net.Error
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return &PollError{KindCanceled, err}
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return &PollError{KindTimeout, err}
	}
	return &PollError{KindConnect, err}
}

// snippet is the start of an error answer, printable, for the log.
func snippet(r io.Reader) string {
	b, _ := io.ReadAll(io.LimitReader(r, 256))
	return quote(strings.TrimSpace(string(b)), 256)
}
