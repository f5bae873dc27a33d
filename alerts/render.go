package alerts

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/vigil-dev/vigil/recovery"
	"github.com/vigil-dev/vigil/util/humanize"
	"github.com/vigil-dev/vigil/watchdog"
)

// renderer writes pages. Every page says what vigil saw and what it will
// and will not do; the plain text carries all of it, the Block Kit form
// adds the evidence as fields.
type renderer struct {
	node      string
	engineURL string // display form, no credentials
	plan      string // what vigil does for hung or down
	drain     string // what a drain takes out of rotation ("" : no load balancer)
	limiter   bool   // the admission limiter is in front of the engine
	pool      func() string
}

var stateEmoji = map[watchdog.State]string{
	watchdog.StateHung:          ":red_circle:",
	watchdog.StateDown:          ":red_circle:",
	watchdog.StateSaturated:     ":large_orange_circle:",
	watchdog.StateMisconfigured: ":large_purple_circle:",
	watchdog.StateUnknown:       ":white_circle:",
	watchdog.StateLoading:       ":hourglass_flowing_sand:",
	watchdog.StateHealthy:       ":large_green_circle:",
}

func label(s watchdog.State) string { return strings.ToUpper(string(s)) }

func severity(s watchdog.State) Severity {
	if s.NeedsRecovery() {
		return SeverityCritical
	}
	return SeverityWarning
}

// where is " (http://127.0.0.1:8000)", or nothing without an engine URL.
func (r renderer) where() string {
	if r.engineURL == "" {
		return ""
	}
	return " (" + r.engineURL + ")"
}

// evidence is the one sentence of what vigil saw, by state.
func (r renderer) evidence(v watchdog.Verdict) string {
	e := v.Evidence
	var parts []string
	add := func(format string, args ...any) { parts = append(parts, fmt.Sprintf(format, args...)) }
	switch v.State {
	case watchdog.StateHung:
		if e.Hang != "" && e.Hang != watchdog.HangEngine && v.Reason != "" {
			// A rank, a decode stall or a wedge: the reason names it (the
			// summed counters still move, so "no progress" would be false).
			add("%s", v.Reason)
		} else if e.SinceProgress > 0 {
			if e.QueueKnown() {
				add("no progress for %s with %s waiting, %s running", humanize.Span(e.SinceProgress), humanize.Count(e.Waiting), humanize.Count(e.Running))
			} else {
				add("no progress for %s, the queue unknown (/metrics unreadable)", humanize.Span(e.SinceProgress))
			}
		} else if v.Reason != "" {
			add("%s", v.Reason)
		}
		if e.Models != "" {
			add("/v1/models %s", e.Models)
		}
		if e.Probe != "" {
			add("probe %s", e.Probe)
		}
	case watchdog.StateSaturated, watchdog.StateHealthy:
		load := fmt.Sprintf("%s waiting, %s running, %s tok/s", humanize.Count(e.Waiting), humanize.Count(e.Running), humanize.Count(e.TokensPerSec))
		if !e.QueueKnown() || !e.RatesKnown() {
			load = "queue and rate unknown (/metrics unreadable)"
		}
		if e.LimiterQueued > 0 {
			load = "engine " + load
		}
		// A window under a second (e.g. right after a counter reset) would
		// print as "in 0s".
		if e.ProgressDelta > 0 && e.Window >= time.Second {
			load += fmt.Sprintf(", counters +%s in %s", humanize.Count(e.ProgressDelta), humanize.Span(e.Window))
		}
		parts = append(parts, load)
		if e.LimiterQueued > 0 {
			// The engine's gauges alone would hide the queue that made it
			// saturated when the limiter holds it.
			add("%s queued in vigil's limiter", humanize.Count(float64(e.LimiterQueued)))
		}
		if e.Probe != "" {
			add("probe %s", e.Probe)
		}
		if e.DrainEstimate > 0 && v.State == watchdog.StateSaturated {
			add("est. drain %s", humanize.Rough(e.DrainEstimate))
		}
	default: // down, misconfigured, unknown, loading: the reason leads
		if v.Reason != "" {
			add("%s", v.Reason)
		}
		if e.MetricsError != "" && !strings.Contains(v.Reason, e.MetricsError) {
			add("metrics unreadable: %s", e.MetricsError)
		}
		if e.Health != "" {
			add("/health %s", e.Health)
		}
		if e.Models != "" {
			add("/v1/models %s", e.Models)
		}
		if e.Probe != "" {
			add("probe %s", e.Probe)
		}
	}
	if e.ProbeFailing != "" && !slices.ContainsFunc(parts, func(s string) bool { return strings.Contains(s, "probe failing") }) {
		add("probe failing: %s (not load: check engine.model)", e.ProbeFailing)
	}
	if len(parts) == 0 {
		return "no evidence recorded"
	}
	return strings.Join(parts, "; ")
}

// intent is what vigil will and will not do about a state. For hung and
// down it is the configured plan, unless a guard refuses the restart (g):
// then it says that, and whether the host is out of rotation.
func (r renderer) intent(s watchdog.State, e watchdog.Evidence, g *refusalNote, at time.Time) string {
	switch s {
	case watchdog.StateHung, watchdog.StateDown:
		if g != nil {
			return refusedIntent(*g, r.drain, at)
		}
		return r.plan
	case watchdog.StateSaturated:
		if r.limiter {
			return "Not restarting: the engine is making progress. " + limiterWords(e)
		}
		return "Not restarting: the engine is making progress. No admission limiter is in front of it (admission.enabled is off), so the queue will grow with the load."
	case watchdog.StateMisconfigured:
		return "Not restarting: a restart cannot fix authentication. Check engine.api_key against the engine's --api-key."
	case watchdog.StateUnknown:
		return "Not restarting: vigil cannot tell saturated from hung without its signals. A human should look."
	}
	return ""
}

// limiterWords says what vigil's limiter did about a saturated engine,
// from what it counted over the verdict's last cycles: shed (and how
// much), queued, or nothing because no call came through it. Its queue's
// depth is in the evidence.
func limiterWords(e watchdog.Evidence) string {
	switch {
	case e.ShedCalls == 0 && e.LimiterQueued == 0:
		return "No call came through vigil's limiter lately: the load reaches the engine around it, so the limiter cannot shed it."
	case e.ShedRate > 0:
		return fmt.Sprintf("The limiter is shedding excess load: %s of %s calls answered 429/503 with Retry-After.",
			percent(e.ShedRate), humanize.Count(float64(e.ShedCalls)))
	case e.LimiterQueued > 0:
		return fmt.Sprintf("The limiter sheds nothing yet: it holds the excess in its queue (%s calls).", humanize.Count(float64(e.LimiterQueued)))
	}
	return fmt.Sprintf("The limiter sheds nothing: it admitted all %s calls lately.", humanize.Count(float64(e.ShedCalls)))
}

// percent is a share for people: "12%", "<1%" for a share too small to
// round to one, never "0%" for something that happened.
func percent(x float64) string {
	if p := math.Round(100 * x); p >= 1 {
		return fmt.Sprintf("%.0f%%", p)
	}
	return "<1%"
}

// sentence joins a title, the engine URL, the evidence and the intent into
// the plain-text page.
func (r renderer) sentence(title, evidence, intent string) string {
	s := title + r.where() + ": " + evidence + "."
	if intent != "" {
		s += " " + intent
	}
	return s
}

// incidentPage builds a page about a verdict under a title; g is the guard
// refusing the restart, if any.
func (r renderer) incidentPage(kind Kind, title string, v watchdog.Verdict, inc *watchdog.Incident, g *refusalNote) Message {
	ev := r.evidence(v)
	in := r.intent(v.State, v.Evidence, g, v.At)
	body := ev + "."
	if in != "" {
		body += "\n" + in
	}
	m := Message{
		Kind:     kind,
		Severity: severity(v.State),
		At:       v.At,
		Text:     r.sentence(title, ev, in),
		Title:    title,
		Body:     body,
		Fields:   r.fields(v),
		Context:  r.context(v, inc),
	}
	if inc != nil {
		m.Incident = inc.ID
	}
	return m
}

func (r renderer) head(v watchdog.Verdict, inc *watchdog.Incident, g *refusalNote) Message {
	return r.incidentPage(KindHead, fmt.Sprintf("%s %s on %s", stateEmoji[v.State], label(v.State), r.node), v, inc, g)
}

func (r renderer) change(v watchdog.Verdict, inc *watchdog.Incident, d decision, g *refusalNote) Message {
	title := fmt.Sprintf("%s %s → %s on %s", stateEmoji[v.State], label(d.From), label(v.State), r.node)
	if d.Again {
		title = fmt.Sprintf("%s %s again on %s", stateEmoji[v.State], label(v.State), r.node)
	}
	return r.incidentPage(KindChange, title, v, inc, g)
}

func (r renderer) update(v watchdog.Verdict, inc *watchdog.Incident, held time.Duration, g *refusalNote) Message {
	m := r.incidentPage(KindUpdate, fmt.Sprintf("%s Still %s on %s", stateEmoji[v.State], label(v.State), r.node), v, inc, g)
	m.Title = "" // a reply, not a new headline
	m.Text = strings.Replace(m.Text, r.where()+": ", r.where()+" after "+humanize.Rough(held)+": ", 1)
	m.Body = "After " + humanize.Rough(held) + ": " + m.Body
	return m
}

func (r renderer) resolve(v watchdog.Verdict, inc *watchdog.Incident, t thread, now time.Time) Message {
	was := t.Announced
	if inc != nil && inc.Peak != "" {
		was = inc.Peak
	}
	opened, closed := t.Opened, now
	if inc != nil {
		if !inc.Opened.IsZero() {
			opened = inc.Opened
		}
		if !inc.Resolved.IsZero() {
			closed = inc.Resolved
			if inc.State == watchdog.StateHealthy && !inc.Changed.IsZero() && inc.Changed.Before(closed) {
				// Healthy since Changed; the calm period (alerts.
				// resolve_after) that confirmed it is not trouble.
				closed = inc.Changed
			}
		}
	}
	title := fmt.Sprintf("%s RESOLVED on %s", stateEmoji[watchdog.StateHealthy], r.node)
	var story []string
	if was != "" {
		story = append(story, "was "+label(was))
	}
	switch d := t.troubleFor(closed); {
	case was.NeedsRecovery() && d > 0:
		// How long the engine was hung or down, from the evidence (the
		// stall's start), not from when the incident opened.
		story = append(story, "for "+humanize.Span(d))
	case !opened.IsZero() && closed.After(opened):
		story = append(story, "for "+humanize.Rough(closed.Sub(opened)))
	}
	if !t.RecoveryFrom.IsZero() {
		to := t.RecoveryTo
		if to.IsZero() {
			to = closed
		}
		if to.After(t.RecoveryFrom) {
			story[len(story)-1] += ";"
			story = append(story, "recovery took "+humanize.Span(to.Sub(t.RecoveryFrom)))
		}
	}
	ev := r.evidence(v)
	if v.State != watchdog.StateHealthy {
		ev = "now " + label(v.State) + ": " + ev
	}
	if len(story) > 0 {
		title += ": " + strings.Join(story, " ")
		ev = strings.Join(story, " ") + "; " + ev
	}
	m := Message{
		Kind:     KindResolve,
		Incident: t.Incident,
		Severity: SeverityInfo,
		At:       v.At,
		Text:     r.sentence(fmt.Sprintf("%s RESOLVED on %s", stateEmoji[watchdog.StateHealthy], r.node), ev, ""),
		Title:    title,
		Body:     ev + ".",
		Fields:   r.fields(v),
		Context:  r.context(v, inc),
	}
	if m.At.IsZero() {
		m.At = now
	}
	return m
}

// headUpdate turns a head-shaped page (a head for the latest verdict, or
// the resolve) into the rewrite of the incident's head message.
func (r renderer) headUpdate(latest Message, now time.Time) Message {
	m := latest
	m.Kind = KindHeadUpdate
	m.Context = append(slices.Clip(m.Context), "latest as of "+humanize.ClockUTC(now))
	return m
}

func (r renderer) fields(v watchdog.Verdict) []Field {
	e := v.Evidence
	var f []Field
	add := func(name, value string) {
		if value != "" {
			f = append(f, Field{Name: name, Value: value})
		}
	}
	// A scrape vigil could not read is no queue of 0: a llama-server
	// without --metrics, or any engine whose /metrics times out.
	if e.QueueKnown() {
		add("Waiting / running", humanize.Count(e.Waiting)+" / "+humanize.Count(e.Running))
	} else {
		add("Waiting / running", "unknown (/metrics unreadable)")
	}
	if e.RatesKnown() {
		add("Throughput", humanize.Count(e.TokensPerSec)+" tok/s")
	} else {
		add("Throughput", "unknown (fewer than two readable scrapes)")
	}
	if e.Window > 0 && e.RatesKnown() {
		add("Progress counters", fmt.Sprintf("+%s in %s", humanize.Count(e.ProgressDelta), humanize.Span(e.Window)))
	}
	if e.SinceProgress > 0 && v.State != watchdog.StateHealthy {
		add("No progress for", humanize.Span(e.SinceProgress))
	}
	add("/v1/models", e.Models)
	add("/health", e.Health)
	add("Probe", e.Probe)
	add("Probe failing", e.ProbeFailing)
	if len(e.Ranks) > 1 {
		var rs []string
		for _, r := range e.Ranks {
			st := "moving"
			switch {
			case r.Hung:
				st = "HUNG " + humanize.Span(r.Stalled)
			case r.Waiting+r.Running == 0:
				st = "idle"
			}
			rs = append(rs, fmt.Sprintf("%s: %s/%s %s", r.Rank, humanize.Count(r.Waiting), humanize.Count(r.Running), st))
		}
		add("Ranks (waiting/running)", strings.Join(rs, ", "))
	}
	if e.DecodeStalled > 0 {
		add("Decode stalled", humanize.Span(e.DecodeStalled))
	}
	add("Odd", strings.Join(e.Odd, "; "))
	if e.DrainEstimate > 0 {
		add("Est. drain", humanize.Rough(e.DrainEstimate))
	}
	if len(e.HeartbeatDeltas) > 0 {
		names := make([]string, 0, len(e.HeartbeatDeltas))
		for n := range e.HeartbeatDeltas {
			names = append(names, n)
		}
		slices.Sort(names)
		var lines []string
		for _, n := range names {
			lines = append(lines, fmt.Sprintf("%s +%s", n, humanize.Count(e.HeartbeatDeltas[n])))
		}
		add("Heartbeats", strings.Join(lines, "\n"))
	}
	add("Metrics", e.MetricsError)
	return f
}

func (r renderer) context(v watchdog.Verdict, inc *watchdog.Incident) []string {
	where := []string{r.node}
	if r.engineURL != "" {
		where = append(where, r.engineURL)
	}
	if inc != nil {
		where = append(where, "incident "+inc.ID)
	}
	if !v.At.IsZero() {
		where = append(where, "verdict at "+v.At.UTC().Format("15:04:05 UTC"))
	}
	c := []string{strings.Join(where, " · ")}
	if v.Reason != "" {
		c = append(c, "Why: "+v.Reason)
	}
	if r.pool != nil {
		if line := r.pool(); line != "" {
			c = append(c, line)
		}
	}
	return c
}

// stepText: the emoji and words for each recovery step that went well.
var stepText = map[recovery.StepName]struct{ emoji, done string }{
	recovery.StepGuardRefused:   {":no_entry:", "not restarting"},
	recovery.StepDrain:          {":arrow_down:", "drained at the load balancer"},
	recovery.StepDrainWait:      {":hourglass_flowing_sand:", "drain wait over"},
	recovery.StepRestarting:     {":arrows_counterclockwise:", "restarting the engine"},
	recovery.StepHeld:           {":pause_button:", "held out of rotation"},
	recovery.StepRestart:        {":arrows_counterclockwise:", "restarted the engine"},
	recovery.StepRestartSkipped: {":fast_forward:", "restart skipped: the engine already restarted itself"},
	recovery.StepWaitReady:      {":white_check_mark:", "engine ready"},
	recovery.StepRestore:        {":arrow_up:", "restoring traffic"},
	recovery.StepResolved:       {":white_check_mark:", "recovery finished"},
	recovery.StepFailed:         {":x:", "recovery step failed"},
}

func (r renderer) step(s recovery.Step) Message {
	t, ok := stepText[s.Name]
	if !ok {
		t.emoji, t.done = ":gear:", strings.ReplaceAll(string(s.Name), "_", " ")
	}
	sev := SeverityInfo
	if s.Name == recovery.StepGuardRefused || s.Name == recovery.StepFailed || (!s.OK && s.Err != "") {
		sev = SeverityWarning
	}
	if !s.OK && s.Err != "" && s.Name != recovery.StepFailed && s.Name != recovery.StepGuardRefused {
		t.emoji, t.done = ":x:", strings.ReplaceAll(string(s.Name), "_", " ")+" failed"
	}
	what := t.done
	if s.DryRun {
		what = "[dry run] " + what
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s: %s", t.emoji, r.node, what)
	if s.Err != "" {
		fmt.Fprintf(&b, ": %s", strings.TrimSuffix(s.Err, "."))
	}
	if s.Detail != "" {
		sep := ": "
		if s.Err != "" {
			sep = ". "
		}
		b.WriteString(sep + strings.TrimSuffix(s.Detail, "."))
	}
	if s.Dropped > 0 {
		fmt.Fprintf(&b, "; aborted %s in-flight requests", humanize.Count(float64(s.Dropped)))
	}
	b.WriteString(".")
	if s.Calls != nil {
		b.WriteString(" " + callFateLine(*s.Calls))
	}
	if s.Name == recovery.StepGuardRefused && s.Guard != recovery.GuardNoRestarter {
		if s.Until.IsZero() {
			b.WriteString(" It has no set time to lift.")
		} else if s.Until.After(s.At) {
			fmt.Fprintf(&b, " Lifts at %s (in %s).", humanize.ClockUTC(s.Until), humanize.Rough(s.Until.Sub(s.At)))
		} else {
			fmt.Fprintf(&b, " Lifts at %s.", humanize.ClockUTC(s.Until))
		}
	}
	text := b.String()
	return Message{
		Kind:     KindStep,
		Incident: s.Incident,
		Severity: sev,
		At:       s.At,
		Text:     text,
		Context:  []string{fmt.Sprintf("%s · incident %s · step %s at %s", r.node, s.Incident, s.Name, s.At.UTC().Format("15:04:05 UTC"))},
	}
}

var noticeEmoji = map[string]string{
	"override":    ":wrench:",
	"retry_storm": ":rotating_light:",
	"digest":      ":bar_chart:",
	// Standing conditions (Pager.Conditions).
	"engine_odd":      ":warning:",
	"probe_failing":   ":warning:",
	"metrics_missing": ":warning:",
}

func (r renderer) notice(topic, text string, fields []Field, now time.Time) Message {
	emoji, ok := noticeEmoji[topic]
	if !ok {
		emoji = ":bell:"
	}
	plain := fmt.Sprintf("%s %s: %s", emoji, r.node, text)
	if len(fields) > 0 {
		var kv []string
		for _, f := range fields {
			kv = append(kv, f.Name+": "+f.Value)
		}
		plain += " (" + strings.Join(kv, "; ") + ")"
	}
	sev := SeverityInfo
	if emoji == ":warning:" || topic == "retry_storm" {
		sev = SeverityWarning
	}
	where := []string{r.node}
	if r.engineURL != "" {
		where = append(where, r.engineURL)
	}
	return Message{
		Kind:     KindNotice,
		Topic:    topic,
		Severity: sev,
		At:       now,
		Text:     plain,
		Body:     emoji + " " + text,
		Fields:   slices.Clone(fields),
		Context:  []string{strings.Join(where, " · ") + " · " + topic},
	}
}

func (r renderer) dropped(n, size int, now time.Time) Message {
	return Message{
		Kind:     KindDropped,
		Severity: SeverityWarning,
		At:       now,
		Text: fmt.Sprintf(":warning: %s: %d pages were dropped while they could not be delivered (the outbox holds %d; evidence updates go first); the rest follow in order.",
			r.node, n, size),
	}
}

// callFateLine says in one line what became of the calls vigil's limiter
// cut from the lost engine: "14 in-flight requests moved to node2, 3
// held for the restarted engine, 3 streams continued, 1 lost: n_gt_1."
func callFateLine(f recovery.CallFate) string {
	var parts []string
	moved, peers := 0, make([]string, 0, len(f.MovedTo))
	for _, p := range slices.Sorted(maps.Keys(f.MovedTo)) {
		moved += f.MovedTo[p]
		peers = append(peers, p)
	}
	if moved > 0 {
		parts = append(parts, fmt.Sprintf("%s in-flight requests moved to %s", humanize.Count(float64(moved)), strings.Join(peers, ", ")))
	}
	if f.Held > 0 {
		held := fmt.Sprintf("%s held for the restarted engine", humanize.Count(float64(f.Held)))
		if f.HeldWaitMax > 0 {
			held += fmt.Sprintf(" (up to %s)", humanize.GoTenths(f.HeldWaitMax))
		}
		parts = append(parts, held)
	}
	if f.Continued > 0 {
		parts = append(parts, fmt.Sprintf("%s streams continued", humanize.Count(float64(f.Continued))))
	}
	if f.Queued > 0 {
		parts = append(parts, fmt.Sprintf("%s new calls held in vigil's queue (wait p50 %s, max %s)",
			humanize.Count(float64(f.Queued)), humanize.GoTenths(f.WaitP50), humanize.GoTenths(f.WaitMax)))
	}
	lost, whys := 0, make([]string, 0, len(f.Lost)+len(f.Refused))
	for _, why := range slices.Sorted(maps.Keys(f.Lost)) {
		lost += f.Lost[why]
		whys = append(whys, fmt.Sprintf("%s (%d)", why, f.Lost[why]))
	}
	// Calls vigil refused while the engine was held are lost as surely
	// as those cut: the client that does not retry never gets an answer.
	for _, why := range slices.Sorted(maps.Keys(f.Refused)) {
		lost += f.Refused[why]
		whys = append(whys, fmt.Sprintf("refused while held: %s (%d)", why, f.Refused[why]))
	}
	if lost > 0 {
		parts = append(parts, fmt.Sprintf("%s lost: %s", humanize.Count(float64(lost)), strings.Join(whys, ", ")))
	} else {
		parts = append(parts, "none lost")
	}
	return strings.Join(parts, ", ") + "."
}
