package simclient

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// Answer is what a client read of one 200 answer of the OpenAI API: a
// JSON completion, or a stream of events to its [DONE]. The tests and
// benchmarks that check a moved or continued call compare it with the
// answer the engine gives uninterrupted.
type Answer struct {
	Text   string
	Stream bool
	// Streams only: the ids its events carried, its [DONE] events, and the
	// code of an error event ("" : none).
	IDs       map[string]bool
	Dones     int
	ErrorCode string
	// Err: the body broke off or could not be read as an answer.
	Err error
}

// Whole reports an answer read to its end: a JSON answer, or a stream of
// one id that ended with one [DONE] and no error event.
func (a Answer) Whole() bool {
	if a.Err != nil || a.ErrorCode != "" {
		return false
	}
	return !a.Stream || (a.Dones == 1 && len(a.IDs) == 1)
}

// ReadAnswer reads resp's body to its end as an answer (the text of its
// first choice).
func ReadAnswer(resp *http.Response) Answer {
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		var body struct {
			Choices []struct {
				Text    string `json:"text"`
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			return Answer{Err: err}
		}
		if len(body.Choices) == 0 {
			return Answer{Err: errors.New("an answer with no choices")}
		}
		return Answer{Text: body.Choices[0].Text + body.Choices[0].Message.Content}
	}
	a := Answer{Stream: true, IDs: map[string]bool{}}
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			a.Dones++
			continue
		}
		var ev struct {
			ID    string `json:"id"`
			Error *struct {
				Code any `json:"code"`
			} `json:"error"`
			Choices []struct {
				Text  string `json:"text"`
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			a.Err = fmt.Errorf("an event that is not JSON: %w", err)
			break
		}
		if ev.Error != nil {
			a.ErrorCode = strings.Trim(fmt.Sprint(ev.Error.Code), `"`)
			continue
		}
		if ev.ID != "" {
			a.IDs[ev.ID] = true
		}
		for _, ch := range ev.Choices {
			text.WriteString(ch.Text + ch.Delta.Content)
		}
	}
	a.Text = text.String()
	switch {
	case a.Err != nil:
	case sc.Err() != nil:
		a.Err = sc.Err()
	case a.Dones == 0 && a.ErrorCode == "":
		a.Err = errors.New("the stream ended before its [DONE]")
	}
	return a
}
