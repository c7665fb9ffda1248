package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// versionString describes the binary: its release, the commit it was built
// from (and "modified" when the tree had uncommitted changes), the Go
// version and the platform.
func versionString() string {
	bi, _ := debug.ReadBuildInfo()
	return describeBuild(version, bi)
}

// describeBuild is versionString for the link-time version v and the build
// information bi (nil when the binary has none). The release is v, or the
// module version when v is "dev" and the binary was built by go install
// MODULE@VERSION. The commit comes from the vcs.* settings the go command
// records when it builds inside a git clone (-buildvcs, on by default;
// not in a git worktree, whose .git is a file go does not recognize).
func describeBuild(v string, bi *debug.BuildInfo) string {
	commit := "commit unknown"
	if bi != nil {
		if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		var rev, modified string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value
			}
		}
		if rev != "" {
			if len(rev) > 12 {
				rev = rev[:12]
			}
			commit = "commit " + rev
			if modified == "true" {
				commit += ", modified"
			}
		}
	}
	return fmt.Sprintf("fencefs %s (%s) %s %s/%s", v, commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
