package e2e_test

import (
	"strings"
	"testing"
	"time"
)

// TestBadInfrastructureGivesAClearErrorAndNeverRestartsAnUndrainedHost
// hangs the engine under load with one piece of vigil's infrastructure
// wrong (docs/design.md section 11): vigil says clearly what is wrong, never
// restarts a host it could not drain, keeps a host it did drain out of
// rotation, and leaves the incident open.
func TestBadInfrastructureGivesAClearErrorAndNeverRestartsAnUndrainedHost(t *testing.T) {
	skipShort(t)
	t.Parallel()
	for _, tc := range []struct {
		name      string
		container string
		// breakIt changes the config and returns what the error must name.
		breakIt func(c *vigilConfig) string
		// drained: vigil could drain, so the host must stay drained.
		drained bool
	}{
		{
			name:      "docker socket missing: vigil drains, cannot restart, and keeps the host drained",
			container: "e2e-nodocker",
			breakIt: func(c *vigilConfig) string {
				c.DockerHost = "unix:///nonexistent-vigil-e2e/docker.sock"
				return "/nonexistent-vigil-e2e/docker.sock"
			},
			drained: true,
		},
		{
			name:      "haproxy socket missing: nothing can be drained, so nothing is restarted",
			container: "e2e-nohaproxy",
			breakIt: func(c *vigilConfig) string {
				c.HAProxySocket = "unix:///nonexistent-vigil-e2e/admin.sock"
				return "/nonexistent-vigil-e2e/admin.sock"
			},
		},
		{
			name:      "server unknown to haproxy: nothing can be drained, so nothing is restarted",
			container: "e2e-noserver",
			breakIt: func(c *vigilConfig) string {
				c.Server = "node9"
				return `server "node9" not found`
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, tc.container)
			cfg := r.vigilConfig(t)
			mention := tc.breakIt(&cfg)
			v := startVigil(t, cfg)
			m := startMonitor(t, r.h, v.StatusURL)
			startLoad(t, r.h.URL(), 4, 200, 3*time.Second)

			m.waitFor(t, 20*time.Second, "vigil call the loaded engine healthy", time.Time{}, func(o obs) bool { return o.Verdict == "healthy" })
			r.eng.waitPastGrace(t)
			before := r.eng.startedAt(t)

			hangAt := time.Now()
			r.eng.hang(t)
			m.waitFor(t, 15*time.Second, "the verdict hung", hangAt, func(o obs) bool { return o.Verdict == "hung" })
			doc := v.waitStatus(t, 20*time.Second, "a recovery error", func(d statusDoc) bool { return d.Recovery.LastError != "" })
			// Hold a while: nothing may change on a retry either.
			time.Sleep(3 * time.Second)
			t.Logf("recovery error: %s", doc.Recovery.LastError)

			if !strings.Contains(doc.Recovery.LastError, mention) {
				t.Errorf("recovery last_error %q does not name %s", doc.Recovery.LastError, mention)
			}
			if !logsError(v.Logs.String(), mention) {
				t.Errorf("vigil's log has no error line naming %s", mention)
			}
			doc = v.mustStatus(t)
			if doc.Incident == nil || !doc.Incident.Resolved.IsZero() || doc.Verdict.State != "hung" {
				t.Errorf("incident %+v with verdict %q; want the incident open and the engine still hung", doc.Incident, doc.Verdict.State)
			}
			if doc.Recovery.Step != "failed" || doc.Recovery.Drained != tc.drained {
				t.Errorf("vigil's recovery: step %q (failed step %q), drained %t; want failed, drained %t",
					doc.Recovery.Step, doc.Recovery.Journal.FailedStep, doc.Recovery.Drained, tc.drained)
			}
			if after := r.eng.startedAt(t); after != before {
				t.Errorf("container StartedAt changed from %s to %s: restarted despite the broken %s", before, after, mention)
			}
			if n := r.eng.starts(t, hangAt, time.Now()); n != 0 {
				t.Errorf("container started %d times since the hang, want 0", n)
			}
			if doc.Recovery.RestartsInWindow != 0 {
				t.Errorf("vigil counts %d restarts, want 0", doc.Recovery.RestartsInWindow)
			}

			st, _, err := haproxyServer(r.h, serverName)
			if err != nil {
				t.Fatal(err)
			}
			if tc.drained {
				drain := m.waitFor(t, time.Second, "HAProxy report the server DRAIN", hangAt, obs.drain)
				if !strings.HasPrefix(st, "DRAIN") {
					t.Errorf("HAProxy says %q at the end; a host vigil drained and could not restart must stay DRAIN", st)
				}
				if back := m.all(drain.At, func(o obs) bool { return o.HAStatus != "" && !o.drain() }); len(back) > 0 {
					t.Errorf("the drained host came back into rotation without a restart: %s", back[0])
				}
				return
			}
			if st != "UP" {
				t.Errorf("HAProxy says %q at the end, want the undrained server still UP", st)
			}
			if out := m.all(time.Time{}, func(o obs) bool {
				return o.drain() || strings.HasPrefix(o.HAStatus, "MAINT") || (o.HAWeight != "" && o.HAWeight != "100")
			}); len(out) > 0 {
				t.Errorf("the server was taken out of rotation or reweighted: %s", out[0])
			}
		})
	}
}

// logsError reports a level=error line in vigil's text log that names
// mention (logrus quotes the error field, escaping its quotes).
func logsError(logs, mention string) bool {
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "level=error") && strings.Contains(strings.ReplaceAll(line, `\"`, `"`), mention) {
			return true
		}
	}
	return false
}
