package balancer

import (
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/configs"
)

func TestNewDrainerByKind(t *testing.T) {
	lb := configs.LoadBalancer{HAProxy: configs.HAProxy{Socket: "/run/haproxy/admin.sock", Backend: "vllm", Server: "node1"}}
	for kind, want := range map[string]string{"haproxy": "haproxy vllm/node1", "none": "none (", "http": "http hook"} {
		lb.Kind = kind
		d, err := NewDrainer(lb)
		if err != nil || !strings.HasPrefix(d.String(), want) {
			t.Errorf("drainer %s: %v, %v", kind, d, err)
		}
	}
	lb.Kind = "f5"
	if _, err := NewDrainer(lb); err == nil {
		t.Error("unknown drainer kind accepted")
	}
}
