package admission

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

func keyHash(k string) string {
	s := sha256.Sum256([]byte(k))
	return hex.EncodeToString(s[:])
}

func TestTenantLimitsIsolateAGreedyKey(t *testing.T) {
	t.Run("a key over its requests per minute gets 429 while another key passes", func(t *testing.T) {
		eng := newFakeEngine(t, okJSON)
		cfg := testConfig()
		cfg.Tenants = configs.Tenants{Keys: []configs.TenantEntry{
			{Name: "batch", KeySHA256: keyHash("greedy"), TenantLimits: configs.TenantLimits{RPM: 3}},
		}}
		p := startProxy(t, cfg, eng.srv.URL)
		c := newClient(t)
		for i := range 3 {
			if a := call(context.Background(), c, p.url, completionBody, "Authorization", "Bearer greedy"); a.status != 200 {
				t.Fatalf("request %d within quota: %d", i, a.status)
			}
		}
		a := call(context.Background(), c, p.url, completionBody, "Authorization", "Bearer greedy")
		checkRejection(t, a, http.StatusTooManyRequests, ReasonTenantRPM, true)
		if b := call(context.Background(), c, p.url, completionBody, "Authorization", "Bearer polite"); b.status != 200 {
			t.Errorf("another key: %d, want 200", b.status)
		}
	})

	t.Run("tokens are charged from the estimate, corrected by usage, and a request bigger than the quota is final", func(t *testing.T) {
		eng := newFakeEngine(t, okJSON) // usage: 6 tokens
		cfg := testConfig()
		cfg.Tenants.Default = configs.TenantLimits{TPM: 1000}
		p := startProxy(t, cfg, eng.srv.URL)
		c := newClient(t)
		// Estimate: ~3 prompt + 600 max_tokens; the answer reports 6, so the
		// charge falls back and the next one fits too.
		body := `{"prompt":"hello","max_tokens":600}`
		for i := range 2 {
			if a := call(context.Background(), c, p.url, body, "Authorization", "Bearer k"); a.status != 200 {
				t.Fatalf("request %d: %d (%s); the usage correction did not return the unused estimate", i, a.status, a.body)
			}
		}
		huge := call(context.Background(), c, p.url, `{"prompt":"hello","max_tokens":5000}`, "Authorization", "Bearer k")
		checkRejection(t, huge, http.StatusTooManyRequests, ReasonTenantTPM, false)
	})

	t.Run("tokens in flight hold the quota until usage comes back", func(t *testing.T) {
		release := make(chan struct{})
		eng := newFakeEngine(t, blockUntil(release))
		cfg := testConfig()
		cfg.Tenants.Default = configs.TenantLimits{TPM: 1000}
		p := startProxy(t, cfg, eng.srv.URL)
		c := newClient(t)
		body := `{"prompt":"hello","max_tokens":600}`
		done := make(chan answer, 1)
		go func() { done <- call(context.Background(), c, p.url, body, "Authorization", "Bearer k") }()
		eventually(t, 2*time.Second, "first request upstream", func() bool { return eng.calls.Load() == 1 })
		a := call(context.Background(), c, p.url, body, "Authorization", "Bearer k")
		checkRejection(t, a, http.StatusTooManyRequests, ReasonTenantTPM, true)
		// Default limits apply per key: another key has its own quota.
		other := make(chan answer, 1)
		go func() {
			other <- call(context.Background(), c, p.url, `{"prompt":"x","max_tokens":1}`, "Authorization", "Bearer other")
		}()
		eventually(t, 2*time.Second, "another key admitted", func() bool { return eng.calls.Load() == 2 })
		close(release)
		if a, b := <-done, <-other; a.status != 200 || b.status != 200 {
			t.Errorf("statuses %d and %d, want 200", a.status, b.status)
		}
	})

	t.Run("a key at its in-flight limit gets 429 while another key is admitted", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		eng := newFakeEngine(t, blockUntil(release))
		cfg := testConfig()
		cfg.MaxInFlight = 8
		cfg.Tenants.Default = configs.TenantLimits{MaxInFlight: 2}
		p := startProxy(t, cfg, eng.srv.URL)
		c := newClient(t)
		for range 2 {
			go call(context.Background(), c, p.url, completionBody, "Authorization", "Bearer batch-job")
		}
		eventually(t, 2*time.Second, "two in flight", func() bool { return eng.cur.Load() == 2 })
		a := call(context.Background(), c, p.url, completionBody, "Authorization", "Bearer batch-job")
		checkRejection(t, a, http.StatusTooManyRequests, ReasonTenantInFlight, true)
		var other atomic.Int64
		go func() {
			other.Store(int64(call(context.Background(), c, p.url, completionBody, "Authorization", "Bearer interactive").status))
		}()
		eventually(t, 2*time.Second, "the other key admitted", func() bool { return eng.cur.Load() == 3 })
	})
}

func TestRetryBudget(t *testing.T) {
	eng := newFakeEngine(t, okJSON)
	cfg := testConfig()
	cfg.RetryRatio = 0.1
	cfg.RetryWindow = time.Minute
	p := startProxy(t, cfg, eng.srv.URL)
	c := newClient(t)
	for range 100 {
		if a := call(context.Background(), c, p.url, completionBody); a.status != 200 {
			t.Fatalf("first attempt: %d", a.status)
		}
	}
	// 10% of 100 first attempts: 10 retries may start new executions.
	for i := range 10 {
		if a := call(context.Background(), c, p.url, completionBody, "X-Stainless-Retry-Count", "1"); a.status != 200 {
			t.Fatalf("retry %d within budget: %d", i, a.status)
		}
	}
	a := call(context.Background(), c, p.url, completionBody, "X-Stainless-Retry-Count", "2")
	checkRejection(t, a, http.StatusTooManyRequests, ReasonRetryBudget, true)

	// A retry that attaches or hits the store costs nothing.
	first := call(context.Background(), c, p.url, completionBody, "Idempotency-Key", "paid-once")
	again := call(context.Background(), c, p.url, completionBody, "Idempotency-Key", "paid-once", "X-Stainless-Retry-Count", "1")
	if first.status != 200 || again.status != 200 {
		t.Errorf("a stored retry over the budget: %d then %d, want 200 and 200", first.status, again.status)
	}
	if s := p.l.Stats(); s.Rejected[ReasonRetryBudget] != 1 || s.Retries != 12 {
		t.Errorf("budget rejections %d, retries seen %d; want 1 and 12", s.Rejected[ReasonRetryBudget], s.Retries)
	}

	t.Run("a quiet system may still retry a few times", func(t *testing.T) {
		p := startProxy(t, cfg, eng.srv.URL)
		for i := range retryFloor {
			if a := call(context.Background(), c, p.url, completionBody, "X-Stainless-Retry-Count", "1"); a.status != 200 {
				t.Fatalf("retry %d with no first attempts yet: %d", i, a.status)
			}
		}
		a := call(context.Background(), c, p.url, completionBody, "X-Stainless-Retry-Count", "1")
		checkRejection(t, a, http.StatusTooManyRequests, ReasonRetryBudget, true)
	})
}

func TestTheRetryBudgetChargesOnlyRetriesThatWouldRunACallAgain(t *testing.T) {
	cfg := testConfig()
	cfg.RetryRatio = 0 // the floor alone: retryFloor budgeted retries a window
	cfg.RetryWindow = time.Minute
	c := newClient(t)

	t.Run("retries of calls that were turned away are not refused by the budget", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		eng := newFakeEngine(t, blockUntil(release))
		cfg := cfg
		cfg.MaxInFlight, cfg.MaxQueue = 1, 0
		p := startProxy(t, cfg, eng.srv.URL)
		go call(context.Background(), c, p.url, completionBody)
		eventually(t, 2*time.Second, "slot taken", func() bool { return p.l.Stats().InFlight == 1 })
		for i := range 3 * retryFloor {
			idem := "turned-away-" + strconv.Itoa(i)
			for n := range 3 {
				a := call(context.Background(), c, p.url, completionBody,
					"Idempotency-Key", idem, "X-Stainless-Retry-Count", strconv.Itoa(n))
				checkRejection(t, a, http.StatusServiceUnavailable, ReasonQueueFull, true)
			}
		}
		if s := p.l.Stats(); s.Rejected[ReasonRetryBudget] != 0 || s.Retries != 2*3*retryFloor {
			t.Errorf("budget rejections %d, retries seen %d; want 0 and %d",
				s.Rejected[ReasonRetryBudget], s.Retries, 2*3*retryFloor)
		}
	})

	t.Run("retries of calls that executed still are", func(t *testing.T) {
		eng := newFakeEngine(t, okJSON)
		cfg := cfg
		cfg.Coalesce = false // no stored answer: a retry would run the call again
		p := startProxy(t, cfg, eng.srv.URL)
		for i := range retryFloor + 1 {
			idem := "executed-" + strconv.Itoa(i)
			if a := call(context.Background(), c, p.url, completionBody, "Idempotency-Key", idem); a.status != 200 {
				t.Fatalf("first attempt %d: %d", i, a.status)
			}
			a := call(context.Background(), c, p.url, completionBody, "Idempotency-Key", idem, "X-Stainless-Retry-Count", "1")
			if i < retryFloor {
				if a.status != 200 {
					t.Fatalf("retry %d within the floor: %d", i, a.status)
				}
				continue
			}
			checkRejection(t, a, http.StatusTooManyRequests, ReasonRetryBudget, true)
		}
	})
}
