package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/simclient"
	"github.com/vigil-dev/vigil/internal/testinfra"
)

// A lone long prefill and a saturated engine, under the rig of the hang
// tests (two vigils, real HAProxy, real Docker), raise no stall suspicion:
// nothing is held, moved or refused for one (issue #36). node1's engine
// prefills slowly (2 ms a token, 2,048 tokens a step), so a 25,000-token
// prompt sends nothing for about 2.5 s, and the short calls sent behind it
// wait for their first byte as long: before, the first of them overdue
// raised a suspicion. Then more clients than the engines have seats: the
// limiters shed the excess as any overload (not asserted here), and
// suspect nothing.
func TestNoSuspicionOnALongPrefillOrASaturatedEngine(t *testing.T) {
	skipShort(t)
	testinfra.Alone(t)
	t.Parallel()
	r := newMovesRigArgs(t, "e2e-nosuspect", []string{"-prefill-token-cost", "2ms", "-step-tokens", "2048", "-max-num-seqs", "8"},
		"node1", "node2")
	want := uninterruptedTexts(t, r.engs[1].api)
	node1 := "http://" + r.vigils[0].cfg.AdmissionListen
	c := &http.Client{Timeout: 60 * time.Second}
	ctx := context.Background()
	for i := range 4 { // short calls: node1's vigil learns the engine's pace
		if call := doSDKCall(ctx, c, node1, i%len(movesCalls), want); !call.ok {
			t.Fatalf("a short call: %s", call.why)
		}
	}

	// The lone long prefill, and three short calls sent behind it.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []string
	long := fmt.Sprintf(`{"prompt":%q,"max_tokens":20,"stream":true}`, strings.Repeat("word ", 20000))
	wg.Add(1)
	go func() {
		defer wg.Done()
		resp, err := c.Post(node1+"/v1/completions", "application/json", strings.NewReader(long))
		if err != nil {
			mu.Lock()
			bad = append(bad, "the long prefill: "+err.Error())
			mu.Unlock()
			return
		}
		defer resp.Body.Close()
		if ans := simclient.ReadAnswer(resp); resp.StatusCode != http.StatusOK || !ans.Whole() {
			mu.Lock()
			bad = append(bad, fmt.Sprintf("the long prefill: status %d, %+v", resp.StatusCode, ans))
			mu.Unlock()
		}
	}()
	time.Sleep(300 * time.Millisecond)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if call := doSDKCall(ctx, c, node1, i, want); !call.ok {
				mu.Lock()
				bad = append(bad, "a call behind the long prefill: "+call.why)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	// Saturated: three clients a seat of node1's engine, through HAProxy.
	l := startSDKLoad(r.h.URL(), 24, want)
	time.Sleep(4 * time.Second)
	calls := l.finish()
	shed := 0 // an overload's own refusals (queue_timeout, stream_deadline): counted, not a suspicion's
	for _, call := range calls {
		if !call.ok {
			shed++
		}
	}
	t.Logf("under saturation: %d calls, %d refused by the limiters as overload", len(calls), shed)
	for _, b := range bad {
		t.Error(b)
	}
	for i, v := range r.vigils {
		f := v.limiterFate(t).Limiter
		t.Logf("node%d: suspicions %d (false %d), diverted %d, held %d, refused while held %v", i+1,
			f.Suspicions, f.FalseSuspicions, f.Diverted, f.Held, f.HeldRefused)
		if f.Suspicions != 0 || f.Diverted != 0 || f.Held != 0 || len(f.HeldRefused) != 0 {
			t.Errorf("node%d: suspicions %d, diverted %d, held %d, refused while held %v; want none on engines that never stopped (%d calls under saturation)",
				i+1, f.Suspicions, f.Diverted, f.Held, f.HeldRefused, len(calls))
		}
	}
}
