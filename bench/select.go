package main

import (
	"fmt"
	"slices"
	"strings"
)

// basicWorkloads are the file and directory operations, in the order they
// run: the names accepted by -workloads are their metric keys.
var basicWorkloads = []string{mSeqRead, mSeqWrite, mReadBack, mCreate, mStat, mReaddir, mRead, mRename, mRenameDir, mUnlink}

// legacyWorkloads are the workloads run as a legacy program does them
// (bash, mv, rm, tar, ls, find), in the order they run. mv and rm -rf
// work on the redirect loop's directory; lsl and find run on a second
// mount of a bucket shared by every target (see legacy.go).
var legacyWorkloads = []string{wRedirect, wAppend, wMv, wRmrf, wRmrfRenamed, wTar, wParallel, wLsl, wFind}

// workloadGroups are the names that stand for several workloads.
var workloadGroups = map[string][]string{
	"all":    append(slices.Clone(basicWorkloads), legacyWorkloads...),
	"basic":  basicWorkloads,
	"legacy": legacyWorkloads,
}

// workloadNeeds lists, for the workloads that read what another one wrote,
// the workload that must run before them in the same target run; selecting
// one selects what it needs.
var workloadNeeds = map[string]string{
	mStat: mCreate, mReaddir: mCreate, mRead: mCreate, mUnlink: mCreate,
	wAppend: wRedirect, wMv: wRedirect, wRmrf: wRedirect,
}

// parseWorkloads parses -workloads: comma-separated workload or group
// names. It returns the selected workloads with what they need, or an
// error naming the unknown name and listing the known ones.
func parseWorkloads(s string) ([]string, error) {
	sel := map[string]bool{}
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if g, ok := workloadGroups[name]; ok {
			for _, w := range g {
				sel[w] = true
			}
			continue
		}
		if !slices.Contains(workloadGroups["all"], name) {
			return nil, fmt.Errorf("unknown workload %q (known: %s, or a group: all, basic, legacy)",
				name, strings.Join(workloadGroups["all"], ","))
		}
		sel[name] = true
	}
	for w, need := range workloadNeeds {
		if sel[w] {
			sel[need] = true
		}
	}
	var out []string
	for _, w := range workloadGroups["all"] {
		if sel[w] {
			out = append(out, w)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no workload selected")
	}
	return out, nil
}

// selected reports whether workload w runs (every one when none was
// chosen: a config made in a test).
func (c config) selected(w string) bool {
	return len(c.Workloads) == 0 || slices.Contains(c.Workloads, w)
}

// selectedAny reports whether any of the workloads ws runs.
func (c config) selectedAny(ws []string) bool {
	return slices.ContainsFunc(ws, c.selected)
}
