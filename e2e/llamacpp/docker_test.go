package llamacpp_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/vigil-dev/vigil/internal/testinfra"
)

// llama-server in a container (an image made with docker import from the
// build and its libraries), frozen with SIGSTOP: HUNG, and restart.kind
// docker restarts the container, after which it serves again.
func TestAContainerisedEngineIsRestartedByDocker(t *testing.T) {
	testinfra.Alone(t) // a real engine on the shared cores: after the parallel suite
	testinfra.Long(t, "tests against a real llama-server")
	l := testinfra.FindLlamaCpp(t)
	d := testinfra.StartDockerd(t)
	const image, name = "vigil-e2e/llama-server:1", "llama"
	d.ImportImage(t, image, l.ImageFiles(t)...)
	addr := testinfra.FreeAddr(t)
	host, port, _ := strings.Cut(addr, ":")
	d.RunContainer(t, testinfra.Container{Name: name, Image: image, Cmd: []string{"/llama-server",
		"--model", "/tiny-llama.gguf", "--host", host, "--port", port, "--metrics", "--slots",
		"--threads", "1", "--ctx-size", "4096", "--no-webui", "--parallel", fmt.Sprint(slots)}})
	engine := "http://" + addr
	testinfra.WaitFor(t, 30*time.Second, "llama-server in its container", func() bool {
		resp, err := statusClient.Get(engine + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	started := d.StartedAt(t, name)

	v := startVigil(t, config{engine: engine, dockerHost: d.Host, container: name})
	m := v.watch(t)
	m.waitState(t, "healthy", 10*time.Second)
	l2 := startLoad(t, engine, 4, 16)
	time.Sleep(1500 * time.Millisecond) // past the startup grace, with work in the engine
	stopped := time.Now()
	d.CLI(t, "kill", "--signal", "SIGSTOP", name)
	hungAt := v.waitLog(t, "incident opened: HUNG", 15*time.Second)
	resolvedAt := v.waitLog(t, "incident resolved", 45*time.Second)
	t.Logf("HUNG %s after SIGSTOP; the container restarted and serving %s later",
		hungAt.Sub(stopped).Round(time.Millisecond), resolvedAt.Sub(hungAt).Round(time.Millisecond))
	l2.Stop()
	if again := d.StartedAt(t, name); again == started {
		t.Fatalf("healthy again, but the container was not restarted (started %s)", started)
	}
	m.waitState(t, "healthy", 5*time.Second)
}
