package admission

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// readBody reads and checks the body of an admission-controlled request:
// within max_body_bytes, in time, and JSON on /v1/*. When it is not, the
// client has been answered and ok is false.
func (l *Limiter) readBody(w http.ResponseWriter, r *http.Request) (body []byte, info requestInfo, ok bool) {
	if r.ContentLength > l.cfg.MaxBodyBytes {
		// Refuse before reading a byte, and close: draining 100 MB to keep
		// the connection would be the slow path the limit exists to avoid.
		w.Header().Set("Connection", "close")
		l.reject(w, tooLarge(l.cfg.MaxBodyBytes))
		return nil, info, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, l.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		var ne net.Error
		switch {
		case errors.As(err, &mbe):
			w.Header().Set("Connection", "close")
			l.reject(w, tooLarge(l.cfg.MaxBodyBytes))
		case errors.As(err, &ne) && ne.Timeout():
			w.Header().Set("Connection", "close")
			l.reject(w, &rejection{status: http.StatusRequestTimeout, reason: ReasonBadBody,
				typ: "invalid_request_error", message: "The request body was not received in time."})
		case r.Context().Err() == nil:
			l.reject(w, &rejection{status: http.StatusBadRequest, reason: ReasonBadBody,
				typ: "invalid_request_error", message: "The request body could not be read.", final: true})
		}
		return nil, info, false
	}
	// The body is in: from here the connection's read deadline would only
	// cut a long answer short (net/http cancels the request when its
	// background read times out), so lift it.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	if strings.HasPrefix(r.URL.Path, "/v1/") {
		if !json.Valid(body) {
			l.reject(w, &rejection{status: http.StatusBadRequest, reason: ReasonInvalidJSON, typ: "invalid_request_error",
				message: "The request body is not valid JSON.", final: true})
			return nil, info, false
		}
		_ = json.Unmarshal(body, &info) // a body of another shape still counts by its length
	}
	return body, info, true
}
func tooLarge(limit int64) *rejection {
	return &rejection{status: http.StatusRequestEntityTooLarge, reason: ReasonBodyTooLarge, typ: "invalid_request_error",
		message: "The request body exceeds the limit of " + formatBytes(limit) + ".", final: true}
}
