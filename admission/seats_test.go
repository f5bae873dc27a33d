package admission

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/configs"
	"github.com/vigil-dev/vigil/probes"
	"github.com/vigil-dev/vigil/state"
)

// fakeLlama is llama.cpp's llama-server as the limiter sees it, over real
// HTTP: its /slots (--parallel 2), its queue gauges in /metrics, and
// completions that run while a slot is free and wait in its own queue
// otherwise.
type fakeLlama struct {
	slots            int
	mu               sync.Mutex
	running, waiting int
	maxRunning       atomic.Int64 // the most requests it ever saw at once
	slotReads        atomic.Int64
}

func (f *fakeLlama) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case probes.EndpointSlots:
		f.slotReads.Add(1)
		w.Write([]byte("["))
		for i := range f.slots {
			if i > 0 {
				w.Write([]byte(","))
			}
			fmt.Fprintf(w, `{"id":%d,"is_processing":false}`, i)
		}
		w.Write([]byte("]"))
	case probes.EndpointMetrics:
		f.mu.Lock()
		fmt.Fprintf(w, "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing %d\n"+
			"# TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred %d\n", min(f.running, f.slots), max(0, f.running-f.slots))
		f.mu.Unlock()
	default:
		f.mu.Lock()
		f.running++
		if n := int64(f.running); n > f.maxRunning.Load() {
			f.maxRunning.Store(n)
		}
		f.mu.Unlock()
		time.Sleep(50 * time.Millisecond)
		f.mu.Lock()
		f.running--
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"choices":[{"text":"ok"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`))
	}
}

func llamaReader() *probes.Reader {
	p, _ := configs.ProfileFor(configs.KindLlamaCpp)
	return probes.NewReader(p.Metrics, p.Kind, nil)
}

// Issue 38: on a llama-server with 2 slots the automatic cap, reading the
// engine's queue gauges alone, sawed between 3 and 6. It reads /slots now,
// once, and the cap takes them.
func TestTheCapTakesTheSlotsLlamaCppExposes(t *testing.T) {
	eng := &fakeLlama{slots: 2}
	srv := httptest.NewServer(eng)
	defer srv.Close()
	cfg := testConfig()
	cfg.MaxInFlight = 0
	p := startProxy(t, cfg, srv.URL, WithEngineReader(llamaReader()))
	defer p.stop()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				resp, err := http.Post(p.url+"/v1/completions", "application/json", strings.NewReader(`{"prompt":"x","max_tokens":1}`))
				if err == nil {
					resp.Body.Close()
				}
			}
		})
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.l.Stats().Cap != 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	eng.maxRunning.Store(0)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()
	if c := p.l.Stats().Cap; c != 2 {
		t.Errorf("automatic cap %d on an engine with 2 slots, want 2", c)
	}
	if m := eng.maxRunning.Load(); m > 2 {
		t.Errorf("the engine held %d requests at once once the cap took its slots, want at most 2", m)
	}
	if n := eng.slotReads.Load(); n != 1 {
		t.Errorf("/slots read %d times, want once", n)
	}
}

// Issue 41: what the limiter learned is kept in the state file's section
// for its engine, and a limiter started on it (vigil restarted) begins
// there; a section of another engine is not used.
func TestALimiterStartsFromWhatTheLastOneLearned(t *testing.T) {
	eng := &fakeLlama{slots: 64}
	srv := httptest.NewServer(eng)
	defer srv.Close()
	cfg := testConfig()
	cfg.MaxInFlight = 0
	store := state.Memory()
	first := startProxy(t, cfg, srv.URL, WithLearnedStore(store))
	for range 3 {
		first.l.core.GaveUp("/v1/completions", 6*time.Second)
	}
	first.stop() // Close writes what was learned
	var f learnedFile
	if ok, err := store.Load(learnedSection, &f); !ok || err != nil {
		t.Fatalf("nothing kept at Close: %v %v", ok, err)
	}
	if f.Engine != srv.URL || f.Routes["/v1/completions"].GiveUps == nil {
		t.Fatalf("kept %+v, want the engine %s and the route's give-ups", f, srv.URL)
	}
	// As if the last vigil had found the engine's capacity at 40.
	f.Cap = 40
	if err := store.Save(learnedSection, f); err != nil {
		t.Fatal(err)
	}
	second := startProxy(t, cfg, srv.URL, WithLearnedStore(store))
	defer second.stop()
	if s := second.l.Stats(); s.Cap != 40 {
		t.Errorf("restarted limiter's cap %d, want the 40 learned", s.Cap)
	}
	if d := second.l.core.Stats().LearnedTimeouts["/v1/completions"]; d != 6*time.Second {
		t.Errorf("restarted limiter's learned timeout %v, want 6s", d)
	}
	other := startProxy(t, cfg, "http://127.0.0.1:1", WithLearnedStore(store))
	defer other.stop()
	if s := other.l.Stats(); s.Cap != autoInitial {
		t.Errorf("a limiter of another engine started at %d, want %d", s.Cap, autoInitial)
	}
}
