package fusefs

// Where a close(2), an fsync(2) and a release commit a file: the node's
// side (its mutation lock, its pending attribute change); the content's
// commit itself is file_content_commit.go.

import (
	"context"
	"syscall"
)

// commit commits the node's content (fileContent.commit) and, when the
// commit left them behind, its attributes. Its error is what close(2) and
// fsync(2) report.
func (n *fileNode) commit(ctx context.Context) error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	return n.commitLocked(ctx)
}

// sync stores what the bucket does not have yet of the node: the content
// changes (commit), then, with attrs, a pending attribute change
// (attrwb.go). Its error is what close(2) and fsync(2) report.
func (n *fileNode) sync(ctx context.Context, attrs bool) error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	if err := n.commitLocked(ctx); err != nil || !attrs {
		return err
	}
	return n.storePendingAttrLocked(ctx)
}

// LOCKS_REQUIRED(n.opMu)
func (n *fileNode) commitLocked(ctx context.Context) error {
	metaLeft, err := n.c.commit(ctx)
	if err != nil || !metaLeft {
		return err
	}
	return n.storePendingAttrLocked(ctx)
}

// forgetName asks the kernel to drop its cached directory entry of the
// node, so that the next lookup of the name asks us (and finds what the
// store holds). Sent from a goroutine: an entry notification waits for the
// directory's lock, which the request being served may hold.
func (n *fileNode) forgetName() {
	name, parent := n.Parent()
	if parent == nil {
		return
	}
	go func() {
		if errno := parent.NotifyEntry(name); errno != 0 && errno != syscall.ENOENT {
			n.fsys.log.Debug("cannot invalidate a kernel directory entry", "name", name, "errno", errno)
		}
	}()
}

// contentMeta is the metadata kept when the content is rewritten: everything
// but checksums of the old content that other tools store.
func contentMeta(m map[string]string) map[string]string {
	if _, ok := m["md5chksum"]; !ok {
		return m
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if k != "md5chksum" {
			out[k] = v
		}
	}
	return out
}
