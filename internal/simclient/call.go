package simclient

import (
	"encoding/json"

	"github.com/vigil-dev/vigil/enginesim"
)

// SimCall is one request to the simulated engine, its token counts set
// exactly through the "vigil_sim" body extension.
type SimCall struct {
	Prompt, Prefix int
	PrefixID       string
	Output         int
}

// Body is an OpenAI /v1/completions body for c: max_tokens is the answer
// length, so the engine stops there with finish_reason "stop".
func (c SimCall) Body(model string, stream bool) []byte {
	b, _ := json.Marshal(map[string]any{
		"model":      model,
		"prompt":     "Summarise the attached document.",
		"max_tokens": c.Output,
		"stream":     stream,
		"vigil_sim": enginesim.SimParams{PromptTokens: c.Prompt, PrefixTokens: c.Prefix,
			PrefixID: c.PrefixID, OutputTokens: c.Output},
	})
	return b
}
