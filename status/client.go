package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/overrides"
)

// Client talks to a running vigil's status listener, for the CLI.
type Client struct {
	base string
	http *http.Client
}

// NewClient returns a client for baseURL: "http://127.0.0.1:9108", or the
// bare status.listen value "127.0.0.1:9108".
func NewClient(baseURL string) *Client {
	if !strings.Contains(baseURL, "://") {
		baseURL = "http://" + baseURL
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), http: &http.Client{Timeout: 10 * time.Second}}
}

// APIError is an answer other than 2xx from vigil, with its message (for
// a 400: which rule the override broke).
type APIError struct {
	Method     string
	URL        string
	StatusCode int
	Message    string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("status: %s %s: %d %s: %s", e.Method, e.URL, e.StatusCode, http.StatusText(e.StatusCode), e.Message)
}

// NoAnswerError is a request that got no HTTP answer at all (refused,
// reset, timed out): no vigil listens there, as opposed to one that
// answered something else.
type NoAnswerError struct {
	Method, URL string
	Err         error
}

func (e *NoAnswerError) Error() string {
	if errors.Is(e.Err, syscall.ECONNREFUSED) {
		return fmt.Sprintf("status: %s %s: %v; is vigil running? (status.listen)", e.Method, e.URL, e.Err)
	}
	return fmt.Sprintf("status: %s %s: %v", e.Method, e.URL, e.Err)
}

func (e *NoAnswerError) Unwrap() error { return e.Err }

// SetOverride asks vigil to apply o and returns it as now in effect.
func (c *Client) SetOverride(ctx context.Context, o configs.Override) (overrides.Active, error) {
	value, _ := json.Marshal(o.Value)
	req := overrideRequest{Key: o.Key, Value: value, Reason: o.Reason}
	if !o.Until.IsZero() {
		req.Until = o.Until.Format(time.RFC3339)
	}
	var a overrides.Active
	err := c.do(ctx, http.MethodPost, "/overrides", req, &a)
	return a, err
}

// ListOverrides returns the overrides in effect.
func (c *Client) ListOverrides(ctx context.Context) ([]overrides.Active, error) {
	var list []overrides.Active
	err := c.do(ctx, http.MethodGet, "/overrides", nil, &list)
	return list, err
}

// ClearOverride ends the override on key now and returns what it was.
func (c *Client) ClearOverride(ctx context.Context, key string) (overrides.Active, error) {
	var a overrides.Active
	err := c.do(ctx, http.MethodDelete, "/overrides/"+url.PathEscape(key), nil, &a)
	return a, err
}

// Status returns the /status document as sent.
func (c *Client) Status(ctx context.Context) (json.RawMessage, error) {
	var raw json.RawMessage
	err := c.do(ctx, http.MethodGet, "/status", nil, &raw)
	return raw, err
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	u := c.base + path
	var body io.Reader
	if in != nil {
		data, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("status: encode %s %s: %w", method, u, err)
		}
		body = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fmt.Errorf("status: %s %s: %w", method, u, err)
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // the URL is named below, once
		}
		return &NoAnswerError{Method: method, URL: u, Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return fmt.Errorf("status: %s %s: read answer: %w", method, u, err)
	}
	if resp.StatusCode/100 != 2 {
		apiErr := &APIError{Method: method, URL: u, StatusCode: resp.StatusCode}
		var eb errorBody
		if json.Unmarshal(data, &eb) == nil && eb.Error != "" {
			apiErr.Message = eb.Error
		} else {
			apiErr.Message = strings.TrimSpace(string(data))
		}
		return apiErr
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("status: %s %s: decode answer: %w", method, u, err)
	}
	return nil
}
