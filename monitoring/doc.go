// Package monitoring holds vigil's Prometheus rules (vigil-rules.yml, with
// promtool unit tests in vigil-rules_test.yml) and Grafana dashboard
// (grafana/vigil.json). It has no Go code of its own: its test checks that
// every metric and label value those files query exists in the /metrics of
// a real vigil and of the simulated engine, so a renamed metric breaks CI
// instead of silently emptying a panel or an alert.
package monitoring
