package enginesim

import (
	"os"
	"path/filepath"
)

// readFixture loads the realistic vLLM v1 scrape the tests compare the
// simulated engine's exposition against: the one the metrics parser is
// tested on, in probes/testdata, so the comparison needs nothing outside
// the repository.
func readFixture() (string, error) {
	b, err := os.ReadFile(filepath.Join("..", "probes", "testdata", "vllm-v1-metrics.txt"))
	return string(b), err
}
