package enginesim

import (
	"net/http"
	"strconv"
)

// ControlHandler serves fault injection:
//
//	POST /fault/hang                  every rank stops stepping
//	POST /fault/hang?rank=N           rank N alone stops stepping
//	POST /fault/decode-stall          prefill goes on, decode stops
//	POST /fault/wedge                 no API endpoint answers
//	POST /fault/error?endpoint=P&code=C  endpoint P answers C (default 503)
//	POST /fault/slow?factor=N         steps cost N times more
//	POST /fault/clear                 lifts all of the above
//	POST /fault/crash                 the cores die
//	GET  /fault                       the faults in force and Stats, as JSON
//
// A bad parameter is answered 400 with a message naming it.
func (e *Engine) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /fault", e.faultStatus)
	mux.HandleFunc("POST /fault/hang", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if !q.Has("rank") {
			e.Hang()
			e.faultStatus(w, r)
			return
		}
		rank, err := strconv.Atoi(q.Get("rank"))
		if err != nil {
			badParam(w, "rank must be an integer rank (0.."+strconv.Itoa(e.Ranks()-1)+"), got "+strconv.Quote(q.Get("rank")))
			return
		}
		if err := e.HangRank(rank); err != nil {
			badParam(w, "rank: "+err.Error())
			return
		}
		e.faultStatus(w, r)
	})
	mux.HandleFunc("POST /fault/decode-stall", func(w http.ResponseWriter, r *http.Request) {
		e.StallDecode()
		e.faultStatus(w, r)
	})
	mux.HandleFunc("POST /fault/wedge", func(w http.ResponseWriter, r *http.Request) {
		e.Wedge()
		e.faultStatus(w, r)
	})
	mux.HandleFunc("POST /fault/error", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		path := q.Get("endpoint")
		if path == "" {
			badParam(w, "endpoint is required, e.g. endpoint=/v1/models")
			return
		}
		code := http.StatusServiceUnavailable
		if q.Has("code") {
			var err error
			if code, err = strconv.Atoi(q.Get("code")); err != nil {
				badParam(w, "code must be an HTTP status code (400-599), got "+strconv.Quote(q.Get("code")))
				return
			}
		}
		if err := e.FailEndpoint(path, code); err != nil {
			badParam(w, err.Error())
			return
		}
		e.faultStatus(w, r)
	})
	mux.HandleFunc("POST /fault/slow", func(w http.ResponseWriter, r *http.Request) {
		f, err := strconv.ParseFloat(r.URL.Query().Get("factor"), 64)
		if err != nil || !(f > 0) {
			badParam(w, "factor must be a number > 0")
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

func badParam(w http.ResponseWriter, msg string) {
	writeError(w, http.StatusBadRequest, "BadRequestError", msg)
}

func (e *Engine) faultStatus(w http.ResponseWriter, _ *http.Request) {
	st := e.Stats()
	fs := e.faults()
	writeJSON(w, http.StatusOK, map[string]any{"fault": st.Fault, "slow_factor": st.SlowFactor,
		"hung_ranks": fs.HungRanks, "decode_stall": fs.DecodeStall, "wedged": fs.Wedged, "errors": fs.Errors,
		"stats": st})
}
