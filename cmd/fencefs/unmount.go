package main

import (
	"bytes"
	"fmt"
	"os/exec"
)

// lazyUnmount detaches mp with fusermount3 -uz (or fusermount -uz): the
// kernel mount disappears from the namespace at once and is released when
// its last user closes it.
func lazyUnmount(mp string) error {
	var last error
	for _, bin := range []string{"fusermount3", "fusermount"} {
		path, err := exec.LookPath(bin)
		if err != nil {
			last = err
			continue
		}
		out, err := exec.Command(path, "-uz", mp).CombinedOutput()
		if err == nil {
			return nil
		}
		return fmt.Errorf("%s -uz: %v: %s", bin, err, bytes.TrimSpace(out))
	}
	return last
}
