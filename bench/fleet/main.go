// Command fleet runs N vigils' recovery and pool parts in one process
// against one real etcd: each member has the real pool coordinator
// (pool/coord: the turns, the member directory, the min_serving floor
// over the peers it finds there) and the real recovery sequence
// (recoverer.Recovery), over a stand-in engine (hangs, restarts, loads) and
// one in-memory load balancer that sees every member. An observer checks,
// at every change of the balancer, the members serving against
// min_serving and the members out of rotation against
// max_concurrent_recoveries. Scenarios: a 30% hang wave, a rolling fault,
// the wave with etcd restarted, with the turn holders cut off from etcd,
// and with their vigils restarted mid-turn.
//
//	go run ./bench/fleet [-n 50,200] [-scenarios wave,...] [-runs 1]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-dev/vigil/bench/harness"
	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/util/humanize"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ns := fs.String("n", "50,200", "comma-separated fleet sizes")
	names := fs.String("scenarios", strings.Join(scenarioNames(), ","), "comma-separated scenarios (of "+strings.Join(scenarioNames(), ", ")+")")
	runs := fs.Int("runs", 1, "runs of each scenario and size")
	lease := fs.Duration("lease", 3*time.Second, "pool.etcd.lease_ttl")
	restartFor := fs.Duration("restart", 4*time.Second, "how long a restarted engine loads (longer than -lease, as a real engine's load is longer than the TTL)")
	etcdOnly := fs.Bool("etcd-only", false, "the control: turns on etcd's word alone, the peers' drained members not counted (the wiring before #42)")
	seed := fs.Uint64("seed", 1, "seed of who hangs when")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	var sizes []int
	for _, s := range strings.Split(*ns, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 10 {
			fmt.Fprintf(stderr, "fleet: -n %q: sizes of at least 10\n", s)
			return 2
		}
		sizes = append(sizes, n)
	}
	var scs []scenario
	for _, name := range strings.Split(*names, ",") {
		found := false
		for _, s := range scenarios {
			if s.name == name {
				scs, found = append(scs, s), true
			}
		}
		if !found {
			fmt.Fprintf(stderr, "fleet: -scenarios: unknown %q (have %s)\n", name, strings.Join(scenarioNames(), ", "))
			return 2
		}
	}
	if *lease < 2*time.Second {
		fmt.Fprintf(stderr, "fleet: -lease %s: etcd's minimum is 2s\n", *lease)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := os.MkdirTemp("", "fleet-etcd")
	if err != nil {
		fmt.Fprintf(stderr, "fleet: %v\n", err)
		return 1
	}
	defer os.RemoveAll(dir)
	etcd, err := testinfra.LaunchEtcd(dir)
	if err != nil {
		fmt.Fprintf(stderr, "fleet: %v\n", err)
		return 1
	}
	defer etcd.Stop()
	fmt.Fprintf(stdout, "etcd %s; lease TTL %s; engine load after restart %s; a scenario minute is %s; max_concurrent_recoveries N/10, min_serving N/2\n\n",
		etcd.Endpoint, *lease, *restartFor, minute)
	var all []result
	failed := false
	for r := range *runs {
		for _, n := range sizes {
			for _, sc := range scs {
				p := params{n: n, max: max(2, n/10), minServing: n / 2, leaseTTL: *lease, restartFor: *restartFor, poll: 100 * time.Millisecond, etcdOnly: *etcdOnly}
				fmt.Fprintf(stderr, "fleet: run %d, N=%d, %s (load %s) ...\n", r+1, n, sc.name, harness.LoadAvg())
				res, err := runScenario(ctx, p, sc, etcd, *seed+uint64(r), 3*time.Minute, stderr)
				if err != nil {
					fmt.Fprintf(stderr, "fleet: run %d, N=%d, %s: %v\n", r+1, n, sc.name, err)
					if ctx.Err() != nil {
						return 1
					}
					failed = true
					continue
				}
				all = append(all, res)
				printSeries(stdout, r+1, res)
				// The row so far, in case a later scenario fails.
				printResults(stderr, []result{res})
			}
		}
	}
	printResults(stdout, all)
	if failed {
		return 1
	}
	for _, r := range all {
		if r.obs.overLimit > 0 || r.obs.drainsBelow > 0 || len(r.stuck) > 0 {
			return 1
		}
	}
	return 0
}

var header = []string{"scenario", "N", "max / min_serving", "serving min", "out max", "instants over limit",
	"drains below floor", "every node serves after", "longest wait for a turn", "etcd req/s", "leases max", "stuck", "directory complete after start", "wall"}

func printResults(w io.Writer, rs []result) {
	t := humanize.Table{Header: header}
	for _, r := range rs {
		all := "never"
		if r.allServing > 0 {
			all = humanize.GoTenths(r.allServing)
		}
		t.Add(r.scenario, r.p.n, fmt.Sprintf("%d / %d", r.p.max, r.p.minServing), r.obs.minServing, r.obs.maxOut,
			r.obs.overLimit, r.obs.drainsBelow, all, humanize.GoTenths(r.obs.longestWait), fmt.Sprintf("%.0f", r.reqPerSec),
			r.maxLeases, len(r.stuck), humanize.GoTenths(r.directory), humanize.GoTenths(r.wall))
	}
	fmt.Fprintln(w)
	t.Print(w)
}

// printSeries is one run's serving and out-of-rotation members over time,
// the minimum and the maximum of each second.
func printSeries(w io.Writer, run int, r result) {
	var s, o []string
	for _, b := range r.obs.series {
		s = append(s, strconv.Itoa(b.minServing))
		o = append(o, strconv.Itoa(b.maxOut))
	}
	fmt.Fprintf(w, "run %d %s N=%d: serving per second (min; floor %d): %s\n", run, r.scenario, r.p.n, r.p.minServing, strings.Join(s, " "))
	fmt.Fprintf(w, "run %d %s N=%d: out of rotation per second (max; limit %d): %s\n", run, r.scenario, r.p.n, r.p.max, strings.Join(o, " "))
	if r.obs.firstOver != "" {
		fmt.Fprintf(w, "run %d %s N=%d: first over the limit: %s\n", run, r.scenario, r.p.n, r.obs.firstOver)
	}
	for _, s := range r.stuck {
		fmt.Fprintf(w, "run %d %s N=%d: stuck: %s\n", run, r.scenario, r.p.n, s)
	}
	for _, e := range r.errs {
		fmt.Fprintf(w, "run %d %s N=%d: error: %s\n", run, r.scenario, r.p.n, e)
	}
}
