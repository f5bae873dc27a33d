package enginesim

import (
	"os"
	"path/filepath"
)

// readFixture loads the shared realistic vLLM scrape, when the tree has it.
func readFixture() (string, error) {
	for _, p := range []string{
		filepath.Join("..", "..", "shared", "fixtures", "vllm-v1-metrics.txt"),
		filepath.Join("..", "testdata", "vllm-v1-metrics.txt"),
	} {
		if b, err := os.ReadFile(p); err == nil {
			return string(b), nil
		}
	}
	return "", os.ErrNotExist
}
