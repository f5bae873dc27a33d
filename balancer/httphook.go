package balancer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

// HTTPHooks drains and restores this host by calling HTTP hooks, for load
// balancers without a runtime API. The ready hook's body may carry
// {{weight}}, replaced by the percentage; SetWeight calls the ready hook
// only when it does, since otherwise the hook cannot express a weight.
type HTTPHooks struct {
	cfg    configs.HTTPDrainer
	client *http.Client

	mu     sync.Mutex
	weight int // the last weight set, sent again by Ready
}

// NewHTTPHooks returns a hook drainer. client may be nil (a default client
// is used; the per-call timeout comes from cfg.Timeout).
func NewHTTPHooks(cfg configs.HTTPDrainer, client *http.Client) *HTTPHooks {
	if client == nil {
		client = &http.Client{}
	}
	return &HTTPHooks{cfg: cfg, client: client, weight: 100}
}

func (h *HTTPHooks) String() string { return "http hook " + redactURL(h.cfg.Drain.URL) }

// Drain calls the drain hook.
func (h *HTTPHooks) Drain(ctx context.Context) error {
	return h.call(ctx, "drain", h.cfg.Drain, 0)
}

// Ready calls the ready hook with the last weight set (100% unless a ramp
// set another).
func (h *HTTPHooks) Ready(ctx context.Context) error {
	h.mu.Lock()
	w := h.weight
	h.mu.Unlock()
	return h.call(ctx, "ready", h.cfg.Ready, w)
}

// SetWeight remembers percent for Ready and, if the ready hook's body
// carries {{weight}}, calls it with percent.
func (h *HTTPHooks) SetWeight(ctx context.Context, percent int) error {
	h.mu.Lock()
	h.weight = percent
	h.mu.Unlock()
	if !strings.Contains(h.cfg.Ready.Body, "{{weight}}") {
		return nil
	}
	return h.call(ctx, "ready", h.cfg.Ready, percent)
}

// State is unknown: a hook cannot be read back.
func (h *HTTPHooks) State(context.Context) (State, error) { return State{}, nil }

func (h *HTTPHooks) call(ctx context.Context, name string, hook configs.HTTPHook, weight int) error {
	what := fmt.Sprintf("http hook %s %s %s", name, hook.Method, redactURL(hook.URL))
	if hook.URL == "" {
		return fmt.Errorf("%s: no URL configured", what)
	}
	if h.cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.cfg.Timeout)
		defer cancel()
	}
	method := hook.Method
	if method == "" {
		method = http.MethodPost
	}
	body := strings.ReplaceAll(hook.Body, "{{weight}}", strconv.Itoa(weight))
	req, err := http.NewRequestWithContext(ctx, method, hook.URL, strings.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s: %w", what, redactErr(err, hook.URL))
	}
	if body != "" && strings.HasPrefix(strings.TrimSpace(body), "{") {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := h.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", what, redactErr(err, hook.URL))
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s: status %d after %s: %q", what, resp.StatusCode, time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(snippet)))
	}
	return nil
}

// redactURL keeps scheme, host and path: hook URLs often carry tokens in
// their query or user info, which must not reach a log line or a page.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(invalid URL)"
	}
	s := u.Scheme + "://" + u.Host + u.Path
	if u.RawQuery != "" {
		s += "?..."
	}
	return s
}

// redactErr redacts the URL net/http quotes in its errors, keeping the
// cause (a deadline, a refused connection) unwrappable.
func redactErr(err error, raw string) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = redactURL(ue.URL)
		return ue
	}
	if raw != "" && strings.Contains(err.Error(), raw) {
		return errors.New(strings.ReplaceAll(err.Error(), raw, redactURL(raw)))
	}
	return err
}
