package fusefs

// Where a close(2), an fsync(2) and a release commit a file: the node's
// side (its mutation lock, its pending attribute change); the content's
// commit itself is file_content_commit.go.

import (
	"context"
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

// commitReleased is the last release's commit: it stores only what no live
// handle holds. A handle opened after the release decided it was the last
// keeps every change for its own flush (the open's O_TRUNC included), so
// the check is made again under the content's body lock, which an open's
// truncate and every write take after the open counted its handle.
func (n *fileNode) commitReleased(ctx context.Context) error {
	n.opMu.Lock()
	defer n.opMu.Unlock()
	noneOpen := func() bool {
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.openCount == 0
	}
	metaLeft, err := n.c.commit(ctx, noneOpen)
	if err != nil || !metaLeft {
		return err
	}
	return n.storePendingAttrLocked(ctx)
}

// LOCKS_REQUIRED(n.opMu)
func (n *fileNode) commitLocked(ctx context.Context) error {
	metaLeft, err := n.c.commit(ctx, nil)
	if err != nil || !metaLeft {
		return err
	}
	return n.storePendingAttrLocked(ctx)
}
