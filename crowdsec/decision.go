// SPDX-License-Identifier: Apache-2.0

package crowdsec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Decision is one decision as the LAPI sends it (crowdsec's
// models.Decision). Duration is Go's time.Duration text of the time left,
// "1m59.86s", negative in the deleted list ("-1.04s": ended that long ago).
type Decision struct {
	ID       int64  `json:"id"`
	Type     string `json:"type"`
	Scope    string `json:"scope"`
	Value    string `json:"value"`
	Duration string `json:"duration"`
	Origin   string `json:"origin"`
	Scenario string `json:"scenario"`
}

// Stream is one answer of GET /v1/decisions/stream: {"deleted": [...],
// "new": [...]}, either list possibly null.
type Stream struct {
	New, Deleted []Decision
	// Malformed counts list elements that were not decision objects
	// (null, a number, a field of the wrong JSON type). They are left out
	// of New and Deleted; the rest of the answer stands.
	Malformed int
}

// Errors of DecodeStream that say the answer exceeded a limit. Nothing of
// such an answer is applied.
var (
	ErrTooLarge = errors.New("answer larger than the limit")
	ErrTooMany  = errors.New("more decisions than the limit")
)

// limitReader fails with ErrTooLarge once more than n bytes were read
// (io.LimitReader would end in a plain EOF, which the JSON decoder turns
// into an "unexpected EOF" indistinguishable from a truncated answer).
type limitReader struct {
	r io.Reader
	n int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return 0, ErrTooLarge
	}
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if l.n < 0 {
		return n, ErrTooLarge
	}
	return n, err
}

// DecodeStream decodes one stream answer of at most maxBytes bytes and
// maxDecisions decisions (new and deleted together). It reads as it
// decodes, so an answer over either limit fails without being held in
// memory whole. A syntax error anywhere fails the whole answer: a
// truncated or garbled body says nothing reliable about any decision.
func DecodeStream(r io.Reader, maxBytes int64, maxDecisions int) (*Stream, error) {
	dec := json.NewDecoder(&limitReader{r: r, n: maxBytes})
	if err := expectDelim(dec, '{'); err != nil {
		return nil, err
	}
	s := &Stream{}
	count := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		switch key {
		case "new":
			err = decodeList(dec, &s.New, &s.Malformed, &count, maxDecisions)
		case "deleted":
			err = decodeList(dec, &s.Deleted, &s.Malformed, &count, maxDecisions)
		default:
			// Fields a later LAPI may add: skipped, bounded by maxBytes.
			var skip json.RawMessage
			err = dec.Decode(&skip)
		}
		if err != nil {
			return nil, err
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("data after the answer's object")
		}
		return nil, err
	}
	return s, nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		if err == io.EOF {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("expected %q in the answer, found %v", want, tok)
	}
	return nil
}

func decodeList(dec *json.Decoder, dst *[]Decision, malformed, count *int, max int) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return nil // "new": null, as the LAPI says "none"
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return fmt.Errorf("expected a list of decisions, found %v", tok)
	}
	for dec.More() {
		if *count++; *count > max {
			return fmt.Errorf("%w (%d)", ErrTooMany, max)
		}
		var d *Decision
		err := dec.Decode(&d)
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typeErr) || (err == nil && d == nil):
			// The decoder has consumed the whole element: go on.
			*malformed++
		case err != nil:
			return err
		default:
			*dst = append(*dst, *d)
		}
	}
	return expectDelim(dec, ']')
}
