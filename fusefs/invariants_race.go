//go:build race

package fusefs

// invariantChecks turns on checkInvariantsLocked: every -race build (the
// test suite) checks the file nodes' state after each change.
const invariantChecks = true
