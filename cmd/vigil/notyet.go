package main

import (
	"fmt"
	"io"
)

func runOverride(args []string, stdout, stderr io.Writer) int { return notYet("override", stderr) }

func notYet(cmd string, stderr io.Writer) int {
	fmt.Fprintf(stderr, "vigil %s: not yet\n", cmd)
	return exitFail
}
