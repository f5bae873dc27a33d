// Package haproxystat reads HAProxy's "show stat" answer (runtime API,
// CSV) into a map by server and column, for the tests and benchmarks
// that watch a real HAProxy. (vigil's own drainer reads the columns it
// needs, typed, in balancer/haproxy.go.)
package haproxystat
