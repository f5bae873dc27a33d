package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/enginesim"
)

// The calls: prompts 1,000 ± 500 tokens (uniform), answers lognormal
// around 150 tokens, a quarter each of unary and streamed calls on
// /v1/completions and /v1/chat/completions, n = 1. No vigil_sim: the
// engine sizes the prompt from its text (about 4 characters a token, as
// the limiter does) and stops at max_tokens, so a continuation, whose
// prompt is longer by the text so far and whose max_tokens is shorter by
// it, is the same request to the engine as to a real one.
const (
	promptMean, promptSpread             = 1000, 500
	answerMedian, answerSigma, answerMax = 150, 0.5, 600
	model                                = harness.PaperModel
)

var meanAnswer = harness.MeanLogNormal(answerMedian, answerSigma, answerMax)

// meanCall is the mean call, for enginesim.MeasureCapacity.
var meanCall = enginesim.Workload{PromptTokens: promptMean, OutputTokens: int(meanAnswer + 0.5)}

// kind is a call's path and whether it streams.
type kind int

const (
	unaryCompletion kind = iota
	streamCompletion
	unaryChat
	streamChat
	kinds
)

func (k kind) path() string {
	if k == unaryChat || k == streamChat {
		return "/v1/chat/completions"
	}
	return "/v1/completions"
}

func (k kind) stream() bool { return k == streamCompletion || k == streamChat }

// unary is the kind of the same call without streaming.
func (k kind) unary() kind {
	switch k {
	case streamCompletion:
		return unaryCompletion
	case streamChat:
		return unaryChat
	}
	return k
}

func (k kind) String() string {
	return [...]string{"unary completions", "streamed completions", "unary chat", "streamed chat"}[k]
}

// call is one client call of a run: the same in every arm.
type call struct {
	at     time.Duration // arrival, engine time from the arm's start
	kind   kind
	body   []byte
	answer int // max_tokens
}

// filler is prompt text the engine and the limiter both size at about 4
// characters a token.
var filler = strings.Repeat("lorem ipsum dolor sit amet, ", 1+4*(promptMean+promptSpread)/28)

// draw makes the open-loop Poisson calls at rate (calls per engine
// second) over d, from seed. name goes into every prompt with the call's
// number, so each call's text is its own (the engine's text is a function
// of the prompt).
func draw(seed uint64, name string, rate float64, d time.Duration) []call {
	rng := rand.New(rand.NewPCG(seed, 0x4a17))
	var out []call
	for _, a := range harness.Arrivals(rng, []harness.Phase{{Name: "load", Duration: d, Rate: rate}}) {
		k := kind(rng.IntN(int(kinds)))
		prompt := promptMean - promptSpread + rng.IntN(2*promptSpread+1)
		answer := harness.LogNormal(rng, answerMedian, answerSigma, answerMax)
		text := fmt.Sprintf("%s call %d. ", name, len(out))
		text += filler[:max(0, 4*prompt-len(text))]
		out = append(out, call{at: a.At, kind: k, body: body(k, text, answer, k.stream()), answer: answer})
	}
	return out
}

// withLongPrompts adds n streamed calls with prompts of tokens each,
// spread evenly over d (the first at d/(n+1)): lone long prefills, which
// send nothing for seconds and must raise no suspicion.
func withLongPrompts(calls []call, n, tokens int, d time.Duration) []call {
	for i := range n {
		text := fmt.Sprintf("Long call %d. ", i)
		text += strings.Repeat("lorem ipsum dolor sit amet, ", 1+4*tokens/28)[:max(0, 4*tokens-len(text))]
		calls = append(calls, call{at: d * time.Duration(i+1) / time.Duration(n+1), kind: streamCompletion,
			body: body(streamCompletion, text, answerMedian, true), answer: answerMedian})
	}
	slices.SortStableFunc(calls, func(a, b call) int { return cmp.Compare(a.at, b.at) }) // sent in order
	return calls
}

// body is the request of kind k (stream as given: the expected text is
// asked for unary).
func body(k kind, prompt string, maxTokens int, stream bool) []byte {
	m := map[string]any{"model": model, "max_tokens": maxTokens}
	if stream {
		m["stream"] = true
	}
	if k == unaryChat || k == streamChat {
		m["messages"] = []map[string]string{{"role": "user", "content": prompt}}
	} else {
		m["prompt"] = prompt
	}
	b, _ := json.Marshal(m)
	return b
}

// unaryOf is c's request without streaming: the same text, in one answer.
func unaryOf(c call) []byte {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(c.body, &m); err != nil {
		panic(err) // built by body
	}
	delete(m, "stream")
	b, _ := json.Marshal(m)
	return b
}
