// Command vigil keeps an LLM inference engine serving under overload: a
// watchdog that tells saturated from hung, and an admission limiter in
// front of the engine. The subcommands are package internal/cli's; see
// the README for what each does.
package main

import (
	"os"

	"github.com/vigil-dev/vigil/internal/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr)) }
