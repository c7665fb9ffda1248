package main

import (
	"os"
	"runtime/debug"
)

// gcPercent is the Go garbage collector's target unless GOGC is set. A
// mount keeps a node for every file the kernel holds (find or ls -l over
// 100,000 objects: ~110 MiB live); with Go's default of 100 its RSS reached
// about 2.2 times that (264 MiB), with 50 about 1.8 times (213 MiB), for a
// few percent more CPU on listings and nothing measurable on file I/O,
// whose live heap is small.
const gcPercent = 50

func init() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
}
