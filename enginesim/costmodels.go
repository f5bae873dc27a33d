package enginesim

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// A CostModel is an engine unlike the default one in the way real
// deployments differ: what bounds its throughput, and how fast it steps.
// Each pairs the engine's cost with the calls that make it so (Workload,
// the paper's call shape unless the model is about the calls). Applied to
// a Config it changes the engine only: Scale, the wall-clock ratio every
// benchmark keeps vigil's clock at, stays, so a model ten times faster is
// ten times faster against vigil too.
type CostModel struct {
	Name string
	// What the model stands for, in a line.
	About string
	// Apply changes the engine's cost and capacity.
	Apply func(*Config)
	// Workload is the calls it is benchmarked with: mean prompt, shared
	// prefix and mean answer tokens.
	Workload Workload
	// Speed is how much faster than the default it steps (0.1: ten times
	// slower): latency objectives scale by its inverse.
	Speed float64
}

// paperCalls is the call shape of the paper's experiment: 12,000-token
// prompts sharing a 2,000-token prefix, answers of about 300 tokens.
var paperCalls = Workload{PromptTokens: 12000, PrefixTokens: 2000, OutputTokens: 324}

func scaleCost(f float64) func(*Config) {
	return func(c *Config) {
		c.StepOverhead = time.Duration(float64(c.StepOverhead) / f)
		c.PrefillTokenCost = time.Duration(float64(c.PrefillTokenCost) / f)
		c.SeqCost = time.Duration(float64(c.SeqCost) / f)
	}
}

// CostModels is the family, the default first.
func CostModels() []CostModel {
	return []CostModel{
		{Name: "default", About: "the calibrated default (an 8B model on one GPU)",
			Apply: func(*Config) {}, Workload: paperCalls, Speed: 1},
		{Name: "prefill-bound", About: "prefill three times dearer (a larger model, long prompts): throughput bound by prefill",
			Apply: func(c *Config) { c.PrefillTokenCost *= 3 }, Workload: paperCalls, Speed: 1},
		{Name: "decode-bound", About: "short prompts, long answers, a dearer sequence: throughput bound by decode",
			Apply:    func(c *Config) { c.SeqCost *= 4 },
			Workload: Workload{PromptTokens: 500, OutputTokens: 1200}, Speed: 1},
		{Name: "kv-bound", About: "a KV cache for about 96 of the paper's calls: the batch bound by memory, not seats",
			Apply: func(c *Config) {
				c.KVCacheTokens = 96 * (paperCalls.PromptTokens - paperCalls.PrefixTokens + 2*paperCalls.OutputTokens)
			},
			Workload: paperCalls, Speed: 1},
		{Name: "kv-preempt", About: "#28's emulator: KV for about 96 of the paper's calls, preempting past it below 256 seats, decode bound by context, twenty times faster steps",
			Apply: func(c *Config) {
				c.KVCacheTokens = 96 * (paperCalls.PromptTokens - paperCalls.PrefixTokens + 2*paperCalls.OutputTokens)
				c.Preempt = true
				scaleCost(20)(c)
				c.ContextTokenCost = 3 * time.Nanosecond // 60 ns at the default's pace
			},
			Workload: paperCalls, Speed: 20},
		{Name: "big-prefix", About: "a 10,000-token shared prefix of 12,000 in the prefix cache: little prefill per call",
			Apply:    func(*Config) {},
			Workload: Workload{PromptTokens: 12000, PrefixTokens: 10000, OutputTokens: 324}, Speed: 1},
		{Name: "fast10", About: "ten times faster steps (a small model on a fast GPU)", Apply: scaleCost(10), Workload: paperCalls, Speed: 10},
		{Name: "fast20", About: "twenty times faster steps", Apply: scaleCost(20), Workload: paperCalls, Speed: 20},
		{Name: "slow10", About: "ten times slower steps (a large model, tensor parallel across nodes)", Apply: scaleCost(0.1), Workload: paperCalls, Speed: 0.1},
		{Name: "slow20", About: "twenty times slower steps", Apply: scaleCost(0.05), Workload: paperCalls, Speed: 0.05},
	}
}

// CostModelNames lists the family's names, the default first.
func CostModelNames() []string {
	var names []string
	for _, m := range CostModels() {
		names = append(names, m.Name)
	}
	return names
}

// CostModelByName finds a model of the family; the error lists them.
func CostModelByName(name string) (CostModel, error) {
	ms := CostModels()
	if i := slices.IndexFunc(ms, func(m CostModel) bool { return m.Name == name }); i >= 0 {
		return ms[i], nil
	}
	return CostModel{}, fmt.Errorf("cost model %q: want one of %s", name, strings.Join(CostModelNames(), ", "))
}
