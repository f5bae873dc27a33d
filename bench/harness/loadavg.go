package harness

import (
	"os"
	"strings"
)

// LoadAvg is the machine's 1-minute load average, for the record of how
// busy the shared cores were while a bench ran ("?" where /proc has none).
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
