package watchdog

import (
	"testing"
	"time"

	"github.com/vigil-dev/vigil/probes"
)

// demoOverloadScrapes are the last scrapes before the false HUNG
// (decode stalled) of cmd/vigil-demo's overload straight at the engine,
// as the watchdog recorded them (its state file, read at the verdict) on
// 2026-12-04 at 17:53:18-21 UTC, one fast cycle (100 ms) apart: 2.5x
// capacity of 12k-token prompts from callers with a 5 s (wall) timeout.
// The waiting queue held ~410, every call reached the head as its caller
// gave up, and the one that got a first token (at 20.378) was aborted
// before its second. Decode tokens froze; the engine stepped on (the
// iteration heartbeat, prefix-cache queries: 3-4 admissions a cycle,
// each aborted in its prefill) and ~7 callers a cycle left (the finished
// counter's abort series: all finishes less the others).
var demoOverloadScrapes = []struct {
	at                             string // seconds past 17:53
	waiting, running               float64
	prompt, generation             float64 // the progress counters
	firsts, finished, allFinished  float64 // decode counters; allFinished includes the aborts
	iterations, prefixCacheQueries float64 // heartbeats
}{
	{"18.557", 392, 19, 5496088, 84502, 546, 318, 531, 4853, 5520088},
	{"18.658", 396, 14, 5532088, 84558, 549, 318, 540, 4857, 5556088},
	{"18.759", 399, 11, 5568088, 84589, 552, 318, 546, 4860, 5592088},
	{"18.859", 405, 7, 5604088, 84615, 555, 318, 553, 4864, 5628088},
	{"18.959", 408, 2, 5628088, 84623, 557, 318, 562, 4868, 5664088},
	{"19.060", 409, 1, 5628088, 84623, 557, 318, 569, 4872, 5700088},
	{"19.160", 408, 2, 5628088, 84623, 557, 318, 575, 4875, 5736088},
	{"19.265", 411, 1, 5628088, 84623, 557, 318, 582, 4879, 5772088},
	{"19.365", 410, 2, 5628088, 84623, 557, 318, 590, 4883, 5820088},
	{"19.466", 410, 2, 5628088, 84623, 557, 318, 597, 4887, 5856088},
	{"19.571", 412, 1, 5628088, 84623, 557, 318, 606, 4891, 5892088},
	{"19.674", 413, 2, 5628088, 84623, 557, 318, 610, 4894, 5928088},
	{"19.775", 408, 2, 5628088, 84623, 557, 318, 618, 4898, 5964088},
	{"19.875", 410, 1, 5628088, 84623, 557, 318, 625, 4902, 6000088},
	{"19.975", 406, 2, 5628088, 84623, 557, 318, 633, 4906, 6048088},
	{"20.076", 409, 2, 5628088, 84623, 557, 318, 640, 4910, 6084088},
	{"20.178", 410, 2, 5628088, 84623, 557, 318, 646, 4913, 6120088},
	{"20.278", 406, 2, 5628088, 84623, 557, 318, 654, 4917, 6156088},
	{"20.378", 413, 1, 5640088, 84624, 558, 318, 662, 4921, 6192088},
	{"20.482", 410, 2, 5640088, 84624, 558, 318, 668, 4925, 6240088},
	{"20.611", 411, 2, 5640088, 84624, 558, 318, 675, 4929, 6276088},
	{"20.714", 409, 1, 5640088, 84624, 558, 318, 687, 4933, 6312088},
	{"20.815", 410, 2, 5640088, 84624, 558, 318, 691, 4936, 6348088},
	{"20.915", 410, 2, 5640088, 84624, 558, 318, 699, 4940, 6384088},
	{"21.017", 408, 1, 5640088, 84624, 558, 318, 706, 4944, 6420088},
	{"21.117", 408, 2, 5640088, 84624, 558, 318, 714, 4948, 6468088},
	{"21.217", 406, 1, 5640088, 84624, 558, 318, 721, 4951, 6492088},
	{"21.318", 409, 2, 5640088, 84624, 558, 318, 727, 4955, 6540088},
	{"21.421", 411, 2, 5640088, 84624, 558, 318, 734, 4959, 6576088},
	{"21.521", 411, 1, 5640088, 84624, 558, 318, 743, 4963, 6612088},
	{"21.622", 410, 2, 5640088, 84624, 558, 318, 750, 4967, 6660088},
	{"21.723", 399, 2, 5640088, 84624, 558, 318, 763, 4970, 6684088},
	// The state file is written at most once an interval in fast cycles,
	// so it lagged the verdict (at 22.06, "no decode token for 3.1s") by
	// three scrapes; they continue the pattern above.
	{"21.823", 405, 1, 5640088, 84624, 558, 318, 770, 4974, 6720088},
	{"21.924", 408, 2, 5640088, 84624, 558, 318, 777, 4978, 6756088},
	{"22.025", 410, 1, 5640088, 84624, 558, 318, 784, 4982, 6792088},
}

// The demo's false HUNG, from the watchdog's own record: with the demo's
// thresholds (hang_after 3 s fixed, 100 ms fast cycles), every prefix of
// it is judged, and none may be hung. On the code before the decode rule
// took aborts off what is owed, the last sample was HUNG (decode
// stalled), as the demo's was: "no decode token for 3.1s while 1
// requests got their first token since; 1 running, 410 waiting".
func TestTheDemosOverloadWhoseCallersLeaveIsNoDecodeStall(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 12, 4, 17, 53, 0, 0, time.UTC)
	probeSent := base.Add(16641 * time.Millisecond)
	var h []Sample
	for _, r := range demoOverloadScrapes {
		secs, err := time.ParseDuration(r.at + "s")
		if err != nil {
			t.Fatal(err)
		}
		at := base.Add(secs)
		m := &probes.Metrics{
			Waiting: r.waiting, Running: r.running,
			Progress: map[string]float64{"vllm:prompt_tokens_total": r.prompt, "vllm:generation_tokens_total": r.generation},
			Heartbeats: map[string]float64{"vllm:iteration_tokens_total_count": r.iterations,
				"vllm:prefix_cache_queries_total": r.prefixCacheQueries, "vllm:request_success_total": r.allFinished},
			Extra: map[string]float64{probes.MetricRequestSuccess: r.allFinished},
			Decode: &probes.DecodeCounters{FirstTokens: r.firsts, Generation: r.generation, Finished: r.finished,
				Aborted: r.allFinished - r.finished, AbortsKnown: true},
		}
		h = append(h, Sample{
			At:      at,
			Models:  probes.ModelsObservation{Observation: ok(probes.EndpointModels), Models: []string{"meta-llama/Llama-3.1-8B-Instruct"}},
			Health:  ok(probes.EndpointHealth),
			Metrics: probes.MetricsObservation{Observation: ok(probes.EndpointMetrics), Metrics: m},
			Probe:   probes.CompletionStatus{State: probes.ProbeOutstanding, Started: probeSent, Age: at.Sub(probeSent)},
		})
	}
	p := defaultParams()
	p.HangAfter, p.ProbeSLO, p.Tolerance = 3*time.Second, time.Second, 10*time.Millisecond
	var v Verdict
	for i := range h {
		v = Classify(h[:i+1], p, h[i].At)
		if v.State == StateHung {
			t.Fatalf("at %s: %s", h[i].At.Format("15:04:05.000"), v.Reason)
		}
	}
	if v.State != StateSaturated {
		t.Errorf("the last verdict is %s (%s), want SATURATED: 399 waiting, the engine stepping", v.State, v.Reason)
	}
	t.Logf("%s", v.Reason)
}
