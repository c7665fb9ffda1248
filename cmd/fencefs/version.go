package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// versionString describes the binary: version, VCS revision when the build
// recorded one, Go version and platform.
func versionString() string {
	v := version
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += " (" + s.Value[:12] + ")"
			}
		}
	}
	return fmt.Sprintf("fencefs %s %s %s/%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
