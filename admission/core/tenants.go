package core

import (
	"strings"
	"time"

	"github.com/vigil-dev/vigil/configs"
)

const (
	quotaSpan    = time.Minute // rpm and tpm are per minute
	quotaBuckets = 20          // 3 s precision for Retry-After
	// maxTenantStates bounds the per-key state kept for keys under the
	// default limits; past it, new keys share one state (and so one quota)
	// until idle keys are swept. A flood of fresh keys cannot grow memory.
	maxTenantStates = 10000
	tenantSweep     = time.Minute
)

// tenantState is one key's usage against its limits (under Limiter.mu).
type tenantState struct {
	name     string
	limits   configs.TenantLimits
	inFlight int // queued or forwarded
	rpm, tpm *slidingSum
}

func newTenantState(name string, lim configs.TenantLimits) *tenantState {
	t := &tenantState{name: name, limits: lim}
	if lim.RPM > 0 {
		t.rpm = newSlidingSum(quotaSpan, quotaBuckets)
	}
	if lim.TPM > 0 {
		t.tpm = newSlidingSum(quotaSpan, quotaBuckets)
	}
	return t
}

func limited(l configs.TenantLimits) bool { return l.RPM > 0 || l.TPM > 0 || l.MaxInFlight > 0 }

// verdict of a quota check: reason "" means admitted.
type quotaVerdict struct {
	reason string
	wait   time.Duration // until the quota has room (0: unknown)
	never  bool          // the request can never fit this quota
}

func (t *tenantState) check(now time.Time, tokens int) quotaVerdict {
	if t.limits.TPM > 0 && tokens > t.limits.TPM {
		return quotaVerdict{reason: reasonTenantTPM, never: true}
	}
	if t.limits.MaxInFlight > 0 && t.inFlight >= t.limits.MaxInFlight {
		return quotaVerdict{reason: reasonTenantInFlight}
	}
	if t.rpm != nil {
		if used := t.rpm.sum(now); used+1 > float64(t.limits.RPM) {
			return quotaVerdict{reason: reasonTenantRPM, wait: t.rpm.untilFreed(now, used+1-float64(t.limits.RPM))}
		}
	}
	if t.tpm != nil {
		if used := t.tpm.sum(now); used+float64(tokens) > float64(t.limits.TPM) {
			return quotaVerdict{reason: reasonTenantTPM,
				wait: t.tpm.untilFreed(now, used+float64(tokens)-float64(t.limits.TPM))}
		}
	}
	return quotaVerdict{}
}

func (t *tenantState) charge(now time.Time, tokens int) {
	t.inFlight++
	if t.rpm != nil {
		t.rpm.add(now, 1)
	}
	if t.tpm != nil {
		t.tpm.add(now, float64(tokens))
	}
}

// refund undoes charge for a request that never reached the engine.
func (t *tenantState) refund(now time.Time, tokens int) {
	t.inFlight--
	if t.rpm != nil {
		t.rpm.add(now, -1)
	}
	if t.tpm != nil {
		t.tpm.add(now, -float64(tokens))
	}
}

// finish ends a forwarded request, correcting the token charge from the
// estimate to what the engine reported (actual < 0: unknown, keep it).
func (t *tenantState) finish(now time.Time, estimate, actual int) {
	t.inFlight--
	if t.tpm != nil && actual >= 0 {
		t.tpm.add(now, float64(actual-estimate))
	}
}

func (t *tenantState) idle(now time.Time) bool {
	return t.inFlight == 0 && (t.rpm == nil || t.rpm.empty(now)) && (t.tpm == nil || t.tpm.empty(now))
}

// tenantTable maps key hashes to their limits and usage (under Limiter.mu).
type tenantTable struct {
	listed    map[string]configs.TenantEntry // by lower-case hex hash
	def       configs.TenantLimits
	states    map[string]*tenantState
	overflow  *tenantState
	lastSweep time.Time
}

func newTenantTable(cfg configs.Tenants) *tenantTable {
	t := &tenantTable{listed: map[string]configs.TenantEntry{}, def: cfg.Default, states: map[string]*tenantState{}}
	for _, k := range cfg.Keys {
		t.listed[strings.ToLower(k.KeySHA256)] = k
	}
	return t
}

// lookup returns the state for a key hash, or nil when the key has no
// limits at all (nothing to track).
func (t *tenantTable) lookup(hash string, now time.Time) *tenantState {
	if s, ok := t.states[hash]; ok {
		return s
	}
	name, lim := "default", t.def
	if e, ok := t.listed[hash]; ok {
		name, lim = e.Name, e.TenantLimits
	}
	if !limited(lim) {
		return nil
	}
	if now.Sub(t.lastSweep) >= tenantSweep || len(t.states) >= maxTenantStates {
		t.sweep(now)
	}
	if len(t.states) >= maxTenantStates && name == "default" {
		if t.overflow == nil {
			t.overflow = newTenantState("default", lim)
		}
		return t.overflow
	}
	s := newTenantState(name, lim)
	t.states[hash] = s
	return s
}

func (t *tenantTable) sweep(now time.Time) {
	t.lastSweep = now
	for h, s := range t.states {
		if s.idle(now) {
			delete(t.states, h)
		}
	}
}

// retryBudget limits the retries that create new executions to a ratio of
// first attempts over a sliding window, with a small floor so a quiet system
// can still retry (the SRE book's client-side retry budget, applied once,
// at the server, where every client's retries meet).
type retryBudget struct {
	ratio   float64
	floor   float64
	firsts  *slidingSum
	retries *slidingSum
}

// retryFloor retries per window are always allowed.
const retryFloor = 5

func newRetryBudget(ratio float64, window time.Duration) *retryBudget {
	return &retryBudget{ratio: ratio, floor: retryFloor,
		firsts: newSlidingSum(window, 60), retries: newSlidingSum(window, 60)}
}

func (b *retryBudget) first(now time.Time) { b.firsts.add(now, 1) }

// take charges one retry execution if the budget allows it; otherwise it
// returns how long until it would.
func (b *retryBudget) take(now time.Time) (bool, time.Duration) {
	allowed := max(b.floor, b.ratio*b.firsts.sum(now))
	used := b.retries.sum(now)
	if used+1 <= allowed {
		b.retries.add(now, 1)
		return true, 0
	}
	return false, b.retries.untilFreed(now, used+1-allowed)
}

// charge counts a retry execution admitted over the budget (the engine was
// not behind), so the window still shows what retries cost.
func (b *retryBudget) charge(now time.Time) { b.retries.add(now, 1) }

// give returns a retry charge whose request never reached the engine.
func (b *retryBudget) give(now time.Time) { b.retries.add(now, -1) }
