//go:build !race

package fusefs

const invariantChecks = false
