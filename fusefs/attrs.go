package fusefs

// One implementation of statfs and of the extended attributes for every
// kind of node (files, directories, symlinks, special files): methods of
// the shared nodeBase, promoted to each node type. What differs is how a
// metadata change is stored (node.updateMeta: a file with uncommitted
// changes keeps it with them, every other node writes it at once) and the
// mount root's control attributes (control.go).

import (
	"context"
	"fmt"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// Statfs reports the filesystem's (fixed) capacity, for df on any node.
func (b *nodeBase) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	statfsOut(out)
	return 0
}

// Getxattr reads a user attribute or user.fencefs.stamp; on the mount root
// also the control attributes.
func (b *nodeBase) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if b.ino.IsRoot() {
		if v, ok, err := b.fsys.controlGet(attr); ok || err != nil {
			if err != nil {
				return 0, b.fsys.errno("getxattr", b.fsys.prefix, err)
			}
			sz, err := copyXattr(dest, v)
			return sz, toErrno(err)
		}
	}
	sz, err := b.getxattr(attr, dest)
	if err != nil {
		k, _ := b.key()
		return sz, b.fsys.errno("getxattr", k, err)
	}
	return sz, 0
}

// Listxattr lists the user attributes (and the control attributes on the
// root).
func (b *nodeBase) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	var extra []string
	if b.ino.IsRoot() {
		extra = controlNames
	}
	sz, err := copyXattr(dest, b.listxattr(extra))
	return sz, toErrno(err)
}

// Setxattr stores a user attribute (E2BIG when the object's metadata would
// overflow); on the root, user.fencefs.token binds a token. Linux allows
// user attributes only on regular files and directories (EPERM).
func (b *nodeBase) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	ctx, cancel := b.fsys.mutctx(ctx)
	defer cancel()
	if b.ino.IsRoot() && strings.HasPrefix(attr, xattrControlPrefix) {
		return b.fsys.mutationErrno(ctx, "setxattr", attr, b.fsys.controlSet(ctx, attr, data))
	}
	k, _ := b.key()
	if err := b.userXattrsAllowed(); err != nil {
		return b.fsys.mutationErrno(ctx, "setxattr", k, err)
	}
	mutate, err := xattrSetMutation(attr, data, flags)
	if err == nil {
		err = nodeOf(b.ino).updateMeta(ctx, mutate)
	}
	return b.fsys.mutationErrno(ctx, "setxattr", k, err)
}

// Removexattr removes a user attribute.
func (b *nodeBase) Removexattr(ctx context.Context, attr string) syscall.Errno {
	ctx, cancel := b.fsys.mutctx(ctx)
	defer cancel()
	k, _ := b.key()
	if err := b.userXattrsAllowed(); err != nil {
		return b.fsys.mutationErrno(ctx, "removexattr", k, err)
	}
	mutate, err := xattrRemoveMutation(attr)
	if err == nil {
		err = nodeOf(b.ino).updateMeta(ctx, mutate)
	}
	return b.fsys.mutationErrno(ctx, "removexattr", k, err)
}

func (b *nodeBase) userXattrsAllowed() error {
	if b.kind != kindFile && b.kind != kindDir {
		return fmt.Errorf("%w: user attributes on a symlink or special file", errPerm)
	}
	return nil
}
