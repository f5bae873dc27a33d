// Command overhead measures what a proxy adds in front of a tiny, fast
// upstream: direct, through vigil's admission limiter, and through HAProxy
// (mode http), with the same client at a fixed concurrency and request
// count, for plain JSON completions and for streamed (SSE) ones. The
// upstream and vigil each run in a child process of this command, as
// HAProxy does, so every proxy pays for its own process. Paths take turns
// in short blocks (each keeps its own warm connections), so a hiccup of a
// noisy machine lands on every path alike instead of on one path's run.
//
//	go run ./bench/overhead [-n 10000] [-c 1,8] [-blocks 50]
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/internal/simclient"
	"github.com/vigil-dev/vigil/util/humanize"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

type options struct {
	n, blocks, warm int
	conc            []int
	events          int
	timeout         time.Duration
	// profile, when set, is where the default vigil child writes its CPU
	// profile (to see what its path costs).
	profile string
	// role: "" runs the benchmark; "upstream" and "vigil" are the child
	// processes it starts (listen on -listen, print "ready" when serving).
	role, listen, upstream string
	vigilCap               int
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("overhead", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.IntVar(&o.n, "n", 10000, "measured requests per path, kind and concurrency")
	conc := fs.String("c", "1,8", "concurrent clients: each level is measured in turn")
	fs.StringVar(&o.profile, "vigil-cpuprofile", "", "write the default vigil child's CPU profile to this file")
	fs.IntVar(&o.blocks, "blocks", 50, "blocks the requests are sent in; paths take turns block by block")
	fs.IntVar(&o.warm, "warm", 300, "unmeasured requests per path before the first block")
	fs.IntVar(&o.events, "events", 16, "data events in a streamed answer")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "per-request timeout")
	fs.StringVar(&o.role, "role", "", "internal: run as the upstream or vigil child process")
	fs.StringVar(&o.listen, "listen", "", "internal: child listen address")
	fs.StringVar(&o.upstream, "upstream", "", "internal: vigil child's upstream URL")
	fs.IntVar(&o.vigilCap, "vigil-cap", 0, "internal: vigil child's max_in_flight (0 = automatic)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch o.role {
	case "upstream":
		err = serveUpstream(ctx, o.listen, o.events, stdout)
	case "vigil":
		err = serveVigil(ctx, o.listen, o.upstream, o.vigilCap, o.profile, stdout)
	case "reverseproxy":
		err = serveReverseProxy(ctx, o.listen, o.upstream, stdout)
	case "":
		for _, c := range strings.Split(*conc, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(c))
			if err != nil || n < 1 {
				fmt.Fprintf(stderr, "overhead: -c: %q is not a positive integer\n", c)
				return 2
			}
			o.conc = append(o.conc, n)
		}
		if o.n < 1 || o.blocks < 1 || o.blocks > o.n || o.warm < 0 {
			fmt.Fprintln(stderr, "overhead: -n, -c and -blocks must be positive, -blocks at most -n")
			return 2
		}
		err = experiment(ctx, o, stdout, stderr)
	default:
		fmt.Fprintf(stderr, "overhead: unknown -role %q\n", o.role)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "overhead: %v\n", err)
		return 1
	}
	return 0
}

// child is a process this command started.
type child struct {
	name   string
	cmd    *exec.Cmd
	exited chan error
}

// startChild re-runs this executable with role flags, waits for it to say
// "ready", and returns it. Its stderr goes to ours.
func startChild(ctx context.Context, name string, args ...string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("%s: find own executable: %w", name, err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, exited: make(chan error, 1)}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if !ok && sc.Text() == "ready" {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
		c.exited <- cmd.Wait()
	}()
	select {
	case ok := <-ready:
		if !ok {
			return nil, fmt.Errorf("%s: exited before it was ready: %v", name, <-c.exited)
		}
	case <-time.After(15 * time.Second):
		c.stop()
		return nil, fmt.Errorf("%s: not ready after 15s", name)
	case <-ctx.Done():
		c.stop()
		return nil, ctx.Err()
	}
	return c, nil
}

// stop ends the child (SIGTERM, then SIGKILL after 5 s).
func (c *child) stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
	case <-time.After(5 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

// path is where every arm sends its requests.
type path struct {
	name string
	base string
}

func experiment(ctx context.Context, o options, stdout, stderr io.Writer) error {
	upAddr, err := harness.FreeAddr()
	if err != nil {
		return err
	}
	up, err := startChild(ctx, "upstream", "-role", "upstream", "-listen", upAddr, "-events", fmt.Sprint(o.events))
	if err != nil {
		return err
	}
	defer up.stop()
	upURL := "http://" + upAddr

	paths := []path{{"direct", upURL}}
	for _, v := range []struct {
		name string
		cap  int
	}{{"vigil (defaults: automatic cap)", 0}, {"vigil (max_in_flight 1024)", 1024}} {
		addr, err := harness.FreeAddr()
		if err != nil {
			return err
		}
		args := []string{"-role", "vigil", "-listen", addr, "-upstream", upURL, "-vigil-cap", fmt.Sprint(v.cap)}
		if v.cap == 0 && o.profile != "" {
			args = append(args, "-vigil-cpuprofile", o.profile)
		}
		vc, err := startChild(ctx, "vigil", args...)
		if err != nil {
			return err
		}
		defer vc.stop()
		paths = append(paths, path{v.name, "http://" + addr})
	}
	// The floor for any Go proxy: the standard library's reverse proxy,
	// nothing else, in its own process.
	rpAddr, err := harness.FreeAddr()
	if err != nil {
		return err
	}
	rp, err := startChild(ctx, "reverseproxy", "-role", "reverseproxy", "-listen", rpAddr, "-upstream", upURL)
	if err != nil {
		return err
	}
	defer rp.stop()
	paths = append(paths, path{"Go httputil.ReverseProxy (floor)", "http://" + rpAddr})
	hap, err := harness.StartHAProxy(ctx, upAddr, 2)
	if err != nil {
		return err
	}
	defer hap.Close()
	paths = append(paths, path{"haproxy 2 threads (mode http)", hap.URL()})

	fmt.Fprintf(stdout, "Upstream: a tiny OpenAI-shaped server in its own process (JSON answer; SSE answer of %d events). "+
		"Client: %d measured requests per path, kind and concurrency, in %d blocks; paths take turns block by block, "+
		"each with its own warm connections (%d warm-up requests first). \"added\" is the path's percentile minus direct's.\n",
		o.events, o.n, o.blocks, o.warm)
	for _, conc := range o.conc {
		for _, stream := range []bool{false, true} {
			kind := "plain JSON"
			if stream {
				kind = "streamed (SSE)"
			}
			fmt.Fprintf(stderr, "overhead: %s, %d concurrent ...\n", kind, conc)
			ms, err := interleave(ctx, o, conc, paths, stream)
			if err != nil {
				return fmt.Errorf("%s, %d concurrent: %w", kind, conc, err)
			}
			fmt.Fprintf(stdout, "\n%s, %d concurrent:\n", kind, conc)
			printTable(stdout, paths, ms)
		}
	}
	return nil
}

// interleave warms every path, then sends o.n requests to each in o.blocks
// blocks, the paths taking turns (the first path of a turn rotates, so no
// path always follows the same one).
func interleave(ctx context.Context, o options, conc int, paths []path, stream bool) ([]measurement, error) {
	clients := make([]*http.Client, len(paths))
	for i := range paths {
		clients[i] = simclient.NewHTTPClient()
		defer clients[i].CloseIdleConnections()
		if _, err := measure(ctx, o, clients[i], conc, paths[i].base, stream, o.warm); err != nil {
			return nil, fmt.Errorf("warm-up via %s: %w", paths[i].name, err)
		}
	}
	ms := make([]measurement, len(paths))
	for b := range o.blocks {
		n := o.n/o.blocks + btoi(b < o.n%o.blocks)
		for j := range paths {
			i := (b + j) % len(paths)
			m, err := measure(ctx, o, clients[i], conc, paths[i].base, stream, n)
			if err != nil {
				return nil, fmt.Errorf("via %s: %w", paths[i].name, err)
			}
			ms[i].lat = append(ms[i].lat, m.lat...)
			ms[i].elapsed += m.elapsed
			ms[i].errors += m.errors
		}
	}
	for i, m := range ms {
		if m.errors > o.n/100 {
			return nil, fmt.Errorf("via %s: %d of %d requests failed", paths[i].name, m.errors, o.n)
		}
	}
	return ms, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// measurement is the latencies and wall time of requests through one path.
type measurement struct {
	lat     []time.Duration
	elapsed time.Duration
	errors  int
}

func (m measurement) rate() float64 {
	if m.elapsed <= 0 {
		return 0
	}
	return float64(len(m.lat)) / m.elapsed.Seconds()
}

// measure sends n requests from conc workers through client, each
// bounded by the timeout.
func measure(ctx context.Context, o options, client *http.Client, conc int, base string, stream bool, n int) (measurement, error) {
	body := `{"model":"tiny","prompt":"Say hi.","max_tokens":16}`
	if stream {
		body = `{"model":"tiny","prompt":"Say hi.","max_tokens":16,"stream":true}`
	}
	one := func() (time.Duration, error) {
		rctx, cancel := context.WithTimeout(ctx, o.timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, base+"/v1/completions", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer sk-client-bench")
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		if err != nil {
			return 0, err
		}
		if resp.StatusCode != http.StatusOK || n == 0 {
			return 0, fmt.Errorf("status %d, %d bytes", resp.StatusCode, n)
		}
		return time.Since(start), nil
	}
	runN := func(n int) measurement {
		var next atomic.Int64
		var mu sync.Mutex
		var m measurement
		var wg sync.WaitGroup
		start := time.Now()
		for range conc {
			wg.Go(func() {
				var lat []time.Duration
				errs := 0
				for next.Add(1) <= int64(n) && ctx.Err() == nil {
					d, err := one()
					if err != nil {
						errs++
						continue
					}
					lat = append(lat, d)
				}
				mu.Lock()
				m.lat = append(m.lat, lat...)
				m.errors += errs
				mu.Unlock()
			})
		}
		wg.Wait()
		m.elapsed = time.Since(start)
		return m
	}
	m := runN(n)
	return m, ctx.Err()
}

func printTable(w io.Writer, paths []path, ms []measurement) {
	direct := ms[0]
	us := func(x time.Duration) string { return fmt.Sprintf("%.0f µs", float64(x)/float64(time.Microsecond)) }
	// added is a percentile's excess over direct's: the blocks interleave,
	// so both saw the same machine.
	added := func(i int, p float64) time.Duration {
		return harness.Percentile(ms[i].lat, p) - harness.Percentile(direct.lat, p)
	}
	t := humanize.Table{Header: []string{"path", "p50", "p99", "added p50", "added p99", "req/s", "req/s vs direct", "errors"}}
	hap := -1
	for i := range paths {
		m := ms[i]
		a50, a99 := "", ""
		if i > 0 {
			a50, a99 = us(added(i, 50)), us(added(i, 99))
		}
		if strings.HasPrefix(paths[i].name, "haproxy") {
			hap = i
		}
		t.Add(paths[i].name, us(harness.Percentile(m.lat, 50)), us(harness.Percentile(m.lat, 99)), a50, a99,
			fmt.Sprintf("%.0f", m.rate()), fmt.Sprintf("%.2fx", m.rate()/direct.rate()), m.errors)
	}
	t.Print(w)
	if hap < 0 {
		return
	}
	h99 := added(hap, 99)
	for i, p := range paths {
		if !strings.HasPrefix(p.name, "vigil") {
			continue
		}
		v99 := added(i, 99)
		if v99 <= 0 {
			fmt.Fprintf(w, "%s: added p99 %s, within noise (HAProxy's %s), so no ratio\n", p.name, us(v99), us(h99))
			continue
		}
		if h99 <= 0 {
			fmt.Fprintf(w, "%s: added p99 %s; HAProxy's is within noise (%s), so no ratio\n", p.name, us(v99), us(h99))
			continue
		}
		verdict := "MET"
		if v99 > 2*h99 {
			verdict = "NOT MET"
		}
		fmt.Fprintf(w, "%s: added p99 %.2fx HAProxy's (target <= 2x: %s)\n", p.name, float64(v99)/float64(h99), verdict)
	}
}

// serveUpstream is the tiny engine: a JSON completion, or an SSE stream of
// events chunks, for any POST.
func serveUpstream(ctx context.Context, listen string, events int, stdout io.Writer) error {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return fmt.Errorf("upstream: listen: %w", err)
	}
	plain := []byte(`{"id":"cmpl-1","object":"text_completion","created":1,"model":"tiny","choices":[{"index":0,"text":" hi there","logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":4,"completion_tokens":3,"total_tokens":7}}` + "\n")
	chunk := []byte(`data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"tiny","choices":[{"index":0,"text":" hi","logprobs":null,"finish_reason":null}]}` + "\n\n")
	last := []byte(`data: {"id":"cmpl-1","object":"text_completion","created":1,"model":"tiny","choices":[{"index":0,"text":"","logprobs":null,"finish_reason":"stop"}]}` + "\n\ndata: [DONE]\n\n")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if r.Method != http.MethodPost {
			w.WriteHeader(http.StatusOK)
			return
		}
		if !strings.Contains(string(b), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(plain)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-cache")
		rc := http.NewResponseController(w)
		for range events {
			_, _ = w.Write(chunk)
			_ = rc.Flush()
		}
		_, _ = w.Write(last)
	})
	if err := serveChild(ctx, ln, h, stdout); err != nil {
		return fmt.Errorf("upstream: %w", err)
	}
	return nil
}
