package status

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/util/humanize"
)

// The status page at "/": what an operator opens when a page arrives. It
// renders the same Snapshot as GET /status, server-side, with no script
// (the page must work from a terminal browser or a locked-down jump host)
// and refreshes itself every pageRefresh.

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"num":    humanize.Tenths,
	"secs":   seconds,
	"nsSecs": func(ns float64) float64 { return ns / 1e9 },
	"pct":    humanize.Pct,
	"upper":  strings.ToUpper,
	"inc":    func(i int) int { return i + 1 },
}).Parse(pageHTML))

// pageRefresh is the meta refresh: the watchdog samples every 15 s by
// default, so a faster page shows nothing new.
const pageRefresh = 10 * time.Second

// pageDoc is the part of the Snapshot the page shows. The Snapshot's parts
// belong to other packages and reach this one as any, so the page reads
// them through their JSON, as peers read /status (pool.Doc): a field
// renamed by its owner shows as absent here instead of breaking the build.
type pageDoc struct {
	Node    string    `json:"node"`
	Version string    `json:"version"`
	At      time.Time `json:"at"`
	DryRun  bool      `json:"dry_run"`
	Verdict *struct {
		State    string    `json:"state"`
		Reason   string    `json:"reason"`
		At       time.Time `json:"at"`
		Evidence *struct {
			Waiting         float64            `json:"waiting"`
			Running         float64            `json:"running"`
			TokensPerSecond float64            `json:"tokens_per_second"`
			ProgressDelta   float64            `json:"progress_delta"`
			SinceProgress   float64            `json:"since_progress_seconds"`
			LongestGap      float64            `json:"longest_gap_seconds"`
			Models          string             `json:"models"`
			Health          string             `json:"health"`
			Probe           string             `json:"probe"`
			Heartbeats      map[string]float64 `json:"heartbeat_deltas"`
			DrainEstimate   float64            `json:"drain_estimate_seconds"`
			HangAfter       float64            `json:"hang_after_seconds"`
			HangAfterWhy    string             `json:"hang_after_why"`
			HangAfterFrom   string             `json:"hang_after_from"`
			ShedRate        float64            `json:"shed_rate"`
			ShedCalls       float64            `json:"shed_calls"`
			LimiterQueued   float64            `json:"limiter_queued"`
		} `json:"evidence"`
	} `json:"verdict"`
	Engine       string       `json:"engine"`
	Started      time.Time    `json:"started"`
	Plan         *Plan        `json:"plan"`
	RunbookURL   string       `json:"runbook_url"`
	Incident     *incidentDoc `json:"incident"`
	LastIncident *incidentDoc `json:"last_incident"`
	Recovery     *struct {
		Active           bool      `json:"active"`
		Incident         string    `json:"incident"`
		Step             string    `json:"step"`
		StepAt           time.Time `json:"step_at"`
		Drained          bool      `json:"drained"`
		LastRestart      time.Time `json:"last_restart"`
		RestartsInWindow int       `json:"restarts_in_window"`
		Budget           int       `json:"budget"`
		BudgetWindow     string    `json:"budget_window"`
		NextAttempt      time.Time `json:"next_attempt"`
		LastError        string    `json:"last_error"`
	} `json:"recovery"`
	Limiter *struct {
		Calls              float64           `json:"calls"`
		Executions         float64           `json:"executions"`
		Admitted           float64           `json:"admitted"`
		Rejected           map[string]uint64 `json:"rejected"`
		QueueDepth         int               `json:"queue_depth"`
		OldestQueuedNS     float64           `json:"oldest_queued_ns"`
		InFlight           int               `json:"in_flight"`
		Cap                int               `json:"cap"`
		Automatic          bool              `json:"automatic"`
		FirstTokenLimit    int               `json:"first_token_limit"`
		AwaitingFirstToken int               `json:"awaiting_first_token"`
		TTFTObjectiveNS    float64           `json:"ttft_objective_ns"`
		Saturated          bool              `json:"saturated"`
		Recovering         bool              `json:"recovering"`
		SlowStart          bool              `json:"slow_start"`
		CompletionRate     float64           `json:"completion_rate"`
		HeldNow            int               `json:"held_now"`
		Moved              float64           `json:"moved"`
		Continued          float64           `json:"continued"`
		Lost               map[string]uint64 `json:"lost"`
		// The hang window (admission.Stats): a stall suspected now, the
		// suspicions raised and the false ones, calls sent to a peer
		// instead of the held engine, and those refused while it was held.
		Suspected       bool              `json:"suspected"`
		Suspicions      float64           `json:"suspicions"`
		FalseSuspicions float64           `json:"false_suspicions"`
		Diverted        float64           `json:"diverted"`
		HeldRefused     map[string]uint64 `json:"held_refused"`
	} `json:"limiter"`
	Overrides []struct {
		Key    string    `json:"key"`
		Value  string    `json:"value"`
		Until  time.Time `json:"until"`
		Reason string    `json:"reason"`
	} `json:"overrides"`
	Pool []struct {
		Node    string  `json:"node"`
		URL     string  `json:"url"`
		State   string  `json:"state"`
		Waiting float64 `json:"waiting"`
		Running float64 `json:"running"`
		Drained bool    `json:"drained"`
		Err     string  `json:"error"`
	} `json:"pool"`
	Turns *struct {
		Max     int         `json:"max"`
		Holding []turnEntry `json:"holding"`
		Waiting []turnEntry `json:"waiting"`
	} `json:"turns"`
}

// turnEntry is a member holding or waiting for the pool's turn
// (coord.Holder).
type turnEntry struct {
	Node     string    `json:"node"`
	Incident string    `json:"incident"`
	Since    time.Time `json:"since"`
}

// incidentDoc is an incident as the page reads it (watchdog.Incident).
type incidentDoc struct {
	ID       string    `json:"id"`
	Opened   time.Time `json:"opened"`
	State    string    `json:"state"`
	Peak     string    `json:"peak"`
	Changed  time.Time `json:"changed"`
	Resolved time.Time `json:"resolved"`
}

// pageData is what the template sees: the document plus what is worked
// out from it (ages relative to the snapshot, rejections in order).
type pageData struct {
	pageDoc
	Refresh    int
	StateClass string
	Age        func(time.Time) string
	Heartbeats []kv
	Rejections []kv
	OldestWait float64
	// LostCalls says the calls cut by a lost engine that could not move,
	// and those refused while it was held, with why ("none lost",
	// "1 lost: n_gt_1", "21 lost: 21 refused while held (stream_deadline)").
	LostCalls string
	// PoolKnown: the document has a pool (listed peers or etcd members),
	// even if no other member is in it right now.
	PoolKnown bool
	// Uptime is how long this vigil has run ("" when unknown).
	Uptime string
	// LastLasted is how long the last incident lasted.
	LastLasted string
	// RecoveryCurrent: the recovery's step and error belong to what is
	// going on now (a recovery running, a host held drained, or the open
	// incident's recovery). Once its incident resolved they are history,
	// and a red "failed" under a green HEALTHY would say otherwise.
	RecoveryCurrent bool
	// NoRestarter: restart.kind is none, so the page says nothing of
	// restarts, budgets or next attempts.
	NoRestarter bool
}

type kv struct {
	Key   string
	Value float64
}

func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	snap := s.snapshot()
	body, err := renderPage(snap)
	if err != nil {
		s.log.WithError(err).Error("status page: render failed")
		http.Error(w, "status page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// No script, no outside resource: only the inline stylesheet may load.
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'")
	w.Write(body)
}

// renderPage renders the status page for snap.
func renderPage(snap Snapshot) ([]byte, error) {
	raw, err := json.Marshal(snap)
	if err != nil {
		return nil, fmt.Errorf("encode snapshot: %w", err)
	}
	var d pageData
	if err := json.Unmarshal(raw, &d.pageDoc); err != nil {
		return nil, fmt.Errorf("read snapshot: %w", err)
	}
	d.Refresh = int(pageRefresh.Seconds())
	d.PoolKnown = d.Pool != nil
	at := d.At
	d.Age = func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		ago := at.Sub(t)
		if ago < 0 {
			return "in " + humanize.Duration(-ago)
		}
		return humanize.Duration(ago) + " ago"
	}
	if d.Verdict != nil {
		d.StateClass = stateClass(d.Verdict.State)
		if d.Verdict.Evidence != nil {
			d.Heartbeats = sortedKV(d.Verdict.Evidence.Heartbeats)
		}
	}
	if !d.Started.IsZero() && !at.Before(d.Started) {
		d.Uptime = humanize.Rough(at.Sub(d.Started))
	}
	if l := d.LastIncident; l != nil && !l.Resolved.IsZero() && l.Resolved.After(l.Opened) {
		d.LastLasted = humanize.Rough(l.Resolved.Sub(l.Opened))
	}
	d.NoRestarter = d.Plan != nil && d.Plan.Restart == "none"
	if r := d.Recovery; r != nil {
		d.RecoveryCurrent = r.Active || r.Drained || (d.Incident != nil && r.Incident != "" && r.Incident == d.Incident.ID)
	}
	if d.Limiter != nil {
		for k, v := range d.Limiter.Rejected {
			if v > 0 {
				d.Rejections = append(d.Rejections, kv{k, float64(v)})
			}
		}
		slices.SortFunc(d.Rejections, func(a, b kv) int { return strings.Compare(a.Key, b.Key) })
		d.OldestWait = d.Limiter.OldestQueuedNS / 1e9
		d.LostCalls = lostWords(d.Limiter.Lost, d.Limiter.HeldRefused)
	}
	var buf bytes.Buffer
	if err := pageTmpl.Execute(&buf, d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// stateClass maps a verdict to the page's colour: what needs a human is
// red, what is busy but fine is amber.
func stateClass(state string) string {
	switch state {
	case "healthy":
		return "ok"
	case "saturated", "loading":
		return "busy"
	case "hung", "down", "misconfigured":
		return "bad"
	default:
		return "unknown"
	}
}

func sortedKV(m map[string]float64) []kv {
	out := make([]kv, 0, len(m))
	for k, v := range m {
		out = append(out, kv{k, v})
	}
	slices.SortFunc(out, func(a, b kv) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// seconds shows a duration the snapshot gives in seconds as every other
// vigil output shows a measured duration ("850ms", "4.2s", "3m05s").
func seconds(sec float64) string {
	return humanize.Duration(time.Duration(sec * float64(time.Second)))
}

const pageHTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{{.Refresh}}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{with .Verdict}}{{upper .State}} · {{end}}vigil · {{.Node}}</title>
<style>
body{font:15px/1.45 system-ui,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
header{padding:14px 24px;background:#1d2330;color:#fff;display:flex;gap:18px;align-items:baseline;flex-wrap:wrap}
header h1{font-size:20px;margin:0}
header .meta{color:#b9c0cf;font-size:13px}
header a{color:#9cc3ff}
main{padding:16px 24px;display:grid;grid-template-columns:repeat(auto-fit,minmax(380px,1fr));gap:16px}
section{background:#fff;border:1px solid #dde1e8;border-radius:6px;padding:12px 16px}
section.wide{grid-column:1/-1}
h2{font-size:13px;text-transform:uppercase;letter-spacing:.06em;color:#5b6478;margin:0 0 8px}
.state{display:inline-block;font-weight:700;font-size:22px;padding:2px 12px;border-radius:4px;color:#fff}
.ok{background:#1f8a4c}.busy{background:#c98a00}.bad{background:#c62828}.unknown{background:#6b5bab}
.reason{font-family:ui-monospace,monospace;font-size:14px;margin:10px 0 0;white-space:pre-wrap}
table{border-collapse:collapse;width:100%}
td,th{text-align:left;padding:3px 8px 3px 0;vertical-align:top;font-size:14px}
th{color:#5b6478;font-weight:500}
table.kv th{width:42%}
td.n{font-variant-numeric:tabular-nums}
.warn{color:#c62828;font-weight:600}
.none{color:#8a93a6}
.badge{background:#c98a00;color:#fff;padding:1px 8px;border-radius:3px;font-size:13px}
footer{padding:0 24px 16px;color:#5b6478;font-size:13px}
</style>
</head>
<body>
<header>
<h1>vigil · {{.Node}}</h1>
<span class="meta">{{with .Engine}}engine <span class="engine">{{.}}</span> · {{end}}{{.At.Format "2006-01-02 15:04:05 MST"}}{{with .Version}} · vigil {{.}}{{end}}{{with .Uptime}} · up {{.}}{{end}} · refreshes every {{.Refresh}}s{{with .RunbookURL}} · <a class="runbook" href="{{.}}">runbook</a>{{end}}</span>
{{if .DryRun}}<span class="badge">DRY RUN: logs and pages only</span>{{end}}
</header>
<main>
<section class="wide">
<h2>Verdict</h2>
{{with .Verdict}}<span class="state {{$.StateClass}}">{{upper .State}}</span> <span class="meta">sampled {{call $.Age .At}}</span>
<p class="reason">{{.Reason}}</p>{{else}}<p class="none">No verdict yet: the first sample has not been taken.</p>{{end}}
</section>
<section>
<h2>Evidence</h2>
{{with .Verdict}}{{with .Evidence}}<table class="kv">
<tr><th>waiting / running</th><td class="n">{{num .Waiting}} / {{num .Running}}</td></tr>
<tr><th>progress</th><td class="n">{{num .TokensPerSecond}} tok/s (+{{num .ProgressDelta}} tokens)</td></tr>
<tr><th>since progress</th><td class="n">{{secs .SinceProgress}} (longest gap {{secs .LongestGap}})</td></tr>
{{range $.Heartbeats}}<tr><th>{{.Key}}</th><td class="n">+{{num .Value}}</td></tr>
{{end}}<tr><th>/v1/models</th><td>{{.Models}}</td></tr>
<tr><th>/health</th><td>{{.Health}}</td></tr>
<tr><th>completion probe</th><td>{{.Probe}}</td></tr>
{{if .DrainEstimate}}<tr><th>queue drains in</th><td class="n">{{secs .DrainEstimate}}</td></tr>{{end}}
{{if .HangAfterWhy}}<tr><th>hang_after</th><td>{{.HangAfterWhy}}</td></tr>{{if .HangAfterFrom}}<tr><th>learned from</th><td>{{.HangAfterFrom}}</td></tr>{{end}}{{else if .HangAfter}}<tr><th>hang_after</th><td class="n">{{secs .HangAfter}} (fixed)</td></tr>{{end}}
{{if .ShedCalls}}<tr><th>limiter sheds</th><td class="n">{{pct .ShedRate}} of {{num .ShedCalls}} calls (last 4 cycles), {{num .LimiterQueued}} queued</td></tr>{{end}}
</table>{{end}}{{else}}<p class="none">none</p>{{end}}
</section>
<section>
<h2>Incident and recovery</h2>
<table class="kv">
{{with .Incident}}<tr><th>open incident</th><td>{{.ID}}</td></tr>
<tr><th>opened</th><td>{{call $.Age .Opened}} as {{upper .State}} (peak {{upper .Peak}})</td></tr>
{{else}}<tr><th>open incident</th><td class="none">none</td></tr>
{{end}}{{with .LastIncident}}<tr><th>last incident</th><td>{{.ID}}: {{upper .Peak}}, resolved {{call $.Age .Resolved}}{{with $.LastLasted}} after {{.}}{{end}}</td></tr>
{{end}}{{with .Plan}}<tr><th>recovery would</th><td class="plan">restart: {{.Restart}}{{with .RestartTarget}} ({{.}}){{end}} · load balancer: {{.LoadBalancer}}{{with .DrainTarget}} ({{.}}){{end}}{{with .Summary}}<br>{{.}}{{end}}</td></tr>
{{end}}{{with .Recovery}}<tr><th>recovery step</th><td>{{if and $.RecoveryCurrent .Step}}{{.Step}} ({{call $.Age .StepAt}}){{else}}<span class="none">idle</span>{{end}}{{if .Active}} · running{{end}}</td></tr>
<tr><th>drained by vigil</th><td{{if .Drained}} class="warn"{{end}}>{{if .Drained}}yes{{else}}no{{end}}</td></tr>
{{if not $.NoRestarter}}<tr><th>restarts</th><td class="n">{{.RestartsInWindow}} of {{.Budget}} in {{.BudgetWindow}}{{if not .LastRestart.IsZero}}, last {{call $.Age .LastRestart}}{{end}}</td></tr>
{{if and $.RecoveryCurrent (not .NextAttempt.IsZero)}}<tr><th>next attempt</th><td>{{if .NextAttempt.After $.At}}{{call $.Age .NextAttempt}}{{else}}due: at the next verdict that needs it{{end}}</td></tr>{{end}}
{{end}}{{if and $.RecoveryCurrent .LastError}}<tr><th>last error</th><td class="warn">{{.LastError}}</td></tr>{{end}}
{{end}}</table>
</section>
<section>
<h2>Admission limiter</h2>
{{with .Limiter}}<table class="kv">
<tr><th>in flight / cap</th><td class="n">{{.InFlight}} / {{.Cap}} ({{if .Automatic}}automatic{{else}}fixed{{end}}{{if .SlowStart}}, slow start{{end}}{{if .Saturated}}, engine saturated{{end}}{{if .Recovering}}, recovering{{end}})</td></tr>
{{if .FirstTokenLimit}}<tr><th>streams awaiting first token / limit</th><td class="n">{{.AwaitingFirstToken}} / {{.FirstTokenLimit}}</td></tr>
{{end}}{{if .TTFTObjectiveNS}}<tr><th>first-token objective</th><td class="n">{{secs (nsSecs .TTFTObjectiveNS)}} (p90)</td></tr>
{{end}}<tr><th>queue</th><td class="n">{{.QueueDepth}} waiting{{if .QueueDepth}}, oldest {{secs $.OldestWait}}{{end}}</td></tr>
{{if or .Recovering .HeldNow}}<tr><th>held for the recovery</th><td class="n">{{.HeldNow}} calls cut from the engine, sent again once it serves</td></tr>
{{end}}{{if or .Moved .Continued .Lost .HeldRefused}}<tr><th>calls cut by a lost engine</th><td class="n">{{num .Moved}} moved to peers, {{num .Continued}} streams continued, {{$.LostCalls}}</td></tr>
{{end}}{{if or .Suspected .Suspicions}}<tr><th>stall suspicion</th><td class="n">{{if .Suspected}}<span class="warn">suspected now</span>: nothing new goes to the engine; {{end}}{{num .Suspicions}} raised, {{num .FalseSuspicions}} false (progress resumed), {{num .Diverted}} calls sent to a peer instead</td></tr>
{{end}}
<tr><th>completions</th><td class="n">{{num .CompletionRate}}/s</td></tr>
<tr><th>calls / executions</th><td class="n">{{num .Calls}} / {{num .Executions}}</td></tr>
<tr><th>admitted</th><td class="n">{{num .Admitted}}</td></tr>
{{range $.Rejections}}<tr><th>rejected: {{.Key}}</th><td class="n">{{num .Value}}</td></tr>
{{else}}<tr><th>rejected</th><td class="none">none</td></tr>
{{end}}</table>{{else}}<p class="none">The limiter is off (admission.enabled: false).</p>{{end}}
</section>
<section>
<h2>Pool peers</h2>
{{if .Pool}}<table>
<tr><th>node</th><th>state</th><th>waiting / running</th><th>drained</th></tr>
{{range .Pool}}<tr><td>{{.Node}}</td>{{if .Err}}<td class="warn" colspan="3">unreachable: {{.Err}}</td>{{else}}<td>{{upper .State}}</td><td class="n">{{num .Waiting}} / {{num .Running}}</td><td{{if .Drained}} class="warn"{{end}}>{{if .Drained}}yes{{else}}no{{end}}</td>{{end}}</tr>
{{end}}</table>{{else if .PoolKnown}}<p class="none">No other member found: none listed in pool.peers, none registered in etcd.</p>{{else}}<p class="none">No peers configured (pool.peers).</p>{{end}}
{{with .Turns}}<h3>Turns to recover ({{len .Holding}} of {{.Max}} held, {{len .Waiting}} waiting)</h3>
<table>
<tr><th>#</th><th>node</th><th>incident</th><th>asked</th></tr>
{{range .Holding}}<tr><td>holds</td><td>{{.Node}}</td><td>{{.Incident}}</td><td>{{call $.Age .Since}}</td></tr>
{{end}}{{range $i, $w := .Waiting}}<tr><td>waits {{inc $i}}</td><td>{{$w.Node}}</td><td>{{$w.Incident}}</td><td>{{call $.Age $w.Since}}</td></tr>
{{end}}</table>{{end}}
</section>
{{if .Overrides}}<section>
<h2>Overrides (they expire)</h2>
<table class="kv">
{{range .Overrides}}<tr><th>{{.Key}} = {{.Value}}</th><td>until {{.Until.Format "2006-01-02 15:04 MST"}} ({{call $.Age .Until}}): {{.Reason}}</td></tr>
{{end}}</table>
</section>{{end}}
</main>
<footer>Machine-readable: <a href="/status">/status</a> (JSON) · <a href="/metrics">/metrics</a></footer>
</body>
</html>
`

// lostWords says how many calls were lost and why: "none lost",
// "1 lost: n_gt_1", or "3 lost: 2 n_gt_1, 1 logprobs"; calls refused
// while the engine was held (refused) are lost too: "22 lost: 1 n_gt_1,
// 21 refused while held (20 stream_deadline, 1 queue_timeout)".
func lostWords(lost, refused map[string]uint64) string {
	var total, nrefused uint64
	var parts, whys []string
	for _, why := range slices.Sorted(maps.Keys(lost)) {
		if n := lost[why]; n > 0 {
			total += n
			parts = append(parts, fmt.Sprintf("%d %s", n, why))
		}
	}
	cut := len(parts)
	for _, why := range slices.Sorted(maps.Keys(refused)) {
		if n := refused[why]; n > 0 {
			nrefused += n
			whys = append(whys, fmt.Sprintf("%d %s", n, why))
		}
	}
	if nrefused > 0 {
		total += nrefused
		if len(whys) == 1 {
			whys[0] = strings.SplitN(whys[0], " ", 2)[1]
		}
		parts = append(parts, fmt.Sprintf("%d refused while held (%s)", nrefused, strings.Join(whys, ", ")))
	}
	switch {
	case total == 0:
		return "none lost"
	case cut == 1 && len(parts) == 1:
		return fmt.Sprintf("%d lost: %s", total, strings.SplitN(parts[0], " ", 2)[1])
	}
	return fmt.Sprintf("%d lost: %s", total, strings.Join(parts, ", "))
}
