package cli

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/vigil-dev/vigil/internal/testinfra"
	"github.com/vigil-dev/vigil/internal/testinfra/simengine"
)

func TestStatusURL(t *testing.T) {
	t.Parallel()
	cases := []struct {
		flag, config, listen, want, err string
	}{
		{flag: "", config: "vigil.yaml", listen: "127.0.0.1:9108", want: "http://127.0.0.1:9108"},
		{flag: "", config: "", listen: "127.0.0.1:9108", want: ""},
		{flag: "off", config: "vigil.yaml", listen: "127.0.0.1:9108", want: ""},
		{flag: "127.0.0.1:9200", config: "vigil.yaml", listen: "127.0.0.1:9108", want: "http://127.0.0.1:9200"},
		{flag: "http://[::1]:9108/", want: "http://[::1]:9108"},
		{flag: "ftp://127.0.0.1:9108", err: `--status "ftp://127.0.0.1:9108": want the local vigil's status listener`},
		{flag: "http://", err: `--status "http://"`},
		{flag: "http://ops:hunter2@127.0.0.1:9108", err: "--status http://ops:xxxxx@127.0.0.1:9108: no credentials in the URL"},
	}
	for _, tc := range cases {
		got, err := statusURL(tc.flag, tc.config, tc.listen)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("statusURL(%q): %q, %v; want error %q", tc.flag, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("statusURL(%q, %q, %q) = %q, %v; want %q", tc.flag, tc.config, tc.listen, got, err, tc.want)
		}
	}
}

// What diagnose makes of what answers at the status address before it
// samples: a vigil whose limiter it counts, a line saying why none is
// counted, or an error naming the URL.
func TestFindVigil(t *testing.T) {
	t.Parallel()
	const engine = "http://127.0.0.1:8000"
	serving := func(code int, body string) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/status" {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(code)
			w.Write([]byte(body))
		}))
		t.Cleanup(s.Close)
		return s.URL
	}
	const at = `"at":"2026-12-04T03:00:00Z"`
	cases := []struct {
		name    string
		url     string
		counted bool
		line    string
		err     string
	}{
		{name: "a vigil with a limiter in front of this engine", counted: true,
			url: serving(200, `{`+at+`,"engine":"http://localhost:8000/","limiter":{"calls":3},"limiter_load":{"calls":3,"engine_reads":40,"answered":2}}`)},
		{name: "nothing listens", url: "http://" + testinfra.FreeAddr(t),
			line: "no vigil at http://127.0.0.1:"},
		{name: "a vigil with admission off",
			url:  serving(200, `{`+at+`,"engine":"http://127.0.0.1:8000"}`),
			line: "runs no admission limiter: no traffic through it to count"},
		{name: "a vigil older than limiter_load",
			url:  serving(200, `{`+at+`,"engine":"http://127.0.0.1:8000","limiter":{"calls":3}}`),
			line: "does not report its limiter's counts (older than this diagnose)"},
		{name: "a vigil in front of another engine",
			url:  serving(200, `{`+at+`,"engine":"http://127.0.0.1:8001","limiter_load":{"calls":3}}`),
			line: "watches http://127.0.0.1:8001, not http://127.0.0.1:8000: its limiter's traffic is not counted"},
		{name: "an HTML page", url: serving(200, `<html>hello</html>`), err: "decode answer"},
		{name: "JSON without a time", url: serving(200, `{"engine":"http://127.0.0.1:8000"}`), err: `not a vigil status document: no "at" time`},
		{name: "JSON of the wrong shape", url: serving(200, `{`+at+`,"limiter_load":[1,2]}`), err: "not a vigil status document: json"},
		{name: "a 404", url: serving(404, `no such page`), err: "404 Not Found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src, line, err := findVigil(context.Background(), tc.url, engine)
			t.Logf("line %q, error %v", line, err)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), tc.url+"/status") || !strings.Contains(err.Error(), "--status off") {
					t.Fatalf("error %v, want one naming %s/status with %q and the way out", err, tc.url, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case tc.counted:
				if src == nil || line != "" {
					t.Fatalf("not counted: %q", line)
				}
				l, err := src.ReadLimiter(context.Background())
				if err != nil || l.EngineReads != 40 || l.Answered != 2 || l.Calls != 3 {
					t.Fatalf("read %+v, %v", l, err)
				}
				if src.String() != "the vigil at "+tc.url {
					t.Fatalf("source %q", src)
				}
			default:
				if src != nil || !strings.Contains(line, tc.line) {
					t.Fatalf("source %v, line %q; want none and %q", src, line, tc.line)
				}
			}
		})
	}
}

// The same, through the command: a /status that is not a vigil's fails
// diagnose before it samples, naming the URL; no vigil at all is a line
// under the verdict, judged on the engine alone.
func TestDiagnoseSaysWhenNoVigilCountsTheLimiter(t *testing.T) {
	s := simengine.Start(t, nil)
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("<html>")) }))
	defer bad.Close()
	code, out, errOut := vigil(t, "diagnose", "--engine", s.URL(), "--status", bad.URL, "--window", "250ms", "--interval", "250ms")
	if code != exitDiagnoseOther || out != "" || !strings.Contains(errOut, bad.URL+"/status") || !strings.Contains(errOut, "not a vigil status document") {
		t.Fatalf("a malformed /status: exit %d, out %q, err %q", code, out, errOut)
	}

	none := "http://" + testinfra.FreeAddr(t)
	code, out, errOut = vigil(t, "diagnose", "--engine", s.URL(), "--status", none, "--window", "250ms", "--interval", "250ms")
	if code != 0 || !strings.Contains(out, "note: no vigil at "+none+": the limiter's traffic is not counted") {
		t.Fatalf("no vigil: exit %d\n%s%s", code, errOut, out)
	}
}
