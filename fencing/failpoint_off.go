//go:build !failpoints

package fencing

// FailpointsEnabled reports whether this build honours $FENCEFS_FAILPOINTS.
const FailpointsEnabled = false
