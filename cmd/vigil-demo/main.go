// Command vigil-demo is `vigil demo`: the whole story on a simulated
// engine, no GPU, run by the daemon `vigil run` builds (package
// internal/daemon). It is a binary of its own so that vigil's, which runs on
// every GPU node, links nothing of the simulated engine and clients;
// `vigil demo` runs this one.
package main

import "os"

const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

func main() { os.Exit(runDemo(os.Args[1:], os.Stdout, os.Stderr)) }
