package admission

import (
	"io"
	"log"
)

// newStdLogger adapts net/http's *log.Logger (accept errors, TLS noise)
// to our logrus writer.
func newStdLogger(w io.Writer) *log.Logger { return log.New(w, "", 0) }
