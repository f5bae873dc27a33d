package probes

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/vigil-dev/vigil/configs"
)

// TestSeatsReadOncePerEngineStart: the seats are read once for llama.cpp
// (never for another kind), given up on after seatsTries failures in a
// row, and read again after Reset.
func TestSeatsReadOncePerEngineStart(t *testing.T) {
	for _, tc := range []struct {
		name      string
		code      int
		wantN     int // the last read's seats
		wantErr   bool
		wantTries int64
	}{
		{"two slots: read once", 200, 2, false, 1},
		{"--no-slots: given up after three", 501, 0, true, seatsTries},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tries atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tries.Add(1)
				w.WriteHeader(tc.code)
				_, _ = w.Write([]byte(`[{"id":0,"is_processing":false},{"id":1,"is_processing":true}]`))
			}))
			defer srv.Close()
			var s Seats
			if s.Due(configs.KindVLLM) {
				t.Fatal("seats due for vLLM, which has no /slots")
			}
			var n int
			var err error
			for s.Due(configs.KindLlamaCpp) && tries.Load() < 10 {
				n, err = s.Read(context.Background(), Target{URL: srv.URL})
			}
			if n != tc.wantN || (err != nil) != tc.wantErr || tries.Load() != tc.wantTries {
				t.Fatalf("seats %d err %v after %d reads; want %d, err %v, %d reads", n, err, tries.Load(), tc.wantN, tc.wantErr, tc.wantTries)
			}
			s.Reset()
			if !s.Due(configs.KindLlamaCpp) {
				t.Fatal("seats not due again after Reset (the engine restarted)")
			}
		})
	}
}
