package usage

import (
	"testing"
	"time"
)

func TestMeterCountsEventsAndReadsUsage(t *testing.T) {
	stream := "data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":2,\"total_tokens\":9}}\n\ndata: [DONE]\n\n"
	t0 := time.Unix(1000, 0)
	for _, split := range []int{1, 3, 7, len(stream)} {
		m := Meter{SSE: true}
		for i := 0; i < len(stream); i += split {
			m.Chunk([]byte(stream[i:min(len(stream), i+split)]), t0.Add(time.Duration(i)*time.Millisecond))
		}
		if m.events != 4 {
			t.Errorf("split %d: %d events, want 4", split, m.events)
		}
		if c, tot := m.Tokens(100); c != 2 || tot != 9 {
			t.Errorf("split %d: tokens %d/%d, want 2/9 from usage", split, c, tot)
		}
	}
	noUsage := Meter{SSE: true}
	noUsage.Chunk([]byte("data: {}\n\ndata: {}\n\ndata: [DONE]\n\n"), t0)
	if c, tot := noUsage.Tokens(10); c != 2 || tot != 12 {
		t.Errorf("stream without usage: tokens %d/%d, want 2/12 counted from events", c, tot)
	}
	m := Meter{}
	m.Chunk([]byte(`{"id":"x","usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`), t0)
	if c, tot := m.Tokens(100); c != 4 || tot != 7 {
		t.Errorf("unary tokens %d/%d, want 4/7", c, tot)
	}
}
