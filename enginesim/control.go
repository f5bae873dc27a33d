package enginesim

import (
	"net/http"
	"strconv"
)

// ControlHandler serves fault injection: POST /fault/hang, /fault/crash,
// /fault/slow?factor=N, /fault/clear, and GET /fault (fault and Stats as JSON).
func (e *Engine) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /fault", e.faultStatus)
	mux.HandleFunc("POST /fault/hang", func(w http.ResponseWriter, r *http.Request) {
		e.Hang()
		e.faultStatus(w, r)
	})
	mux.HandleFunc("POST /fault/slow", func(w http.ResponseWriter, r *http.Request) {
		f, err := strconv.ParseFloat(r.URL.Query().Get("factor"), 64)
		if err != nil || !(f > 0) {
			writeError(w, http.StatusBadRequest, "BadRequestError", "factor must be a number > 0")
			return
		}
		e.Slow(f)
		e.faultStatus(w, r)
	})
	mux.HandleFunc("POST /fault/clear", func(w http.ResponseWriter, r *http.Request) {
		e.Clear()
		e.faultStatus(w, r)
	})
	mux.HandleFunc("POST /fault/crash", func(w http.ResponseWriter, _ *http.Request) {
		// Answer first: the crash closes this very listener.
		writeJSON(w, http.StatusOK, map[string]string{"fault": "crash"})
		_ = http.NewResponseController(w).Flush()
		e.Crash()
	})
	return mux
}

func (e *Engine) faultStatus(w http.ResponseWriter, _ *http.Request) {
	st := e.Stats()
	writeJSON(w, http.StatusOK, map[string]any{"fault": st.Fault, "slow_factor": st.SlowFactor, "stats": st})
}
