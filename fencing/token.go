package fencing

import (
	"strconv"
	"strings"
)

// TokenAuto is the text that asks Bind for the register's newest epoch + 1
// (Bind's token 0).
const TokenAuto = "auto"

// ParseToken parses a fencing token as a user writes it (--token, a token
// file, the user.fencefs.token attribute, `fencefs epoch raise`): a decimal
// epoch >= 1, or TokenAuto, which returns 0 (Bind's auto). Surrounding
// blanks and a trailing newline are ignored. Anything else, the empty text
// included, is an error that wraps ErrBadToken and reads, on one line,
// `"x" is not a valid token (accepted: a decimal number >= 1, or auto)`.
func ParseToken(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	if s == TokenAuto {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 {
		return 0, badTokenError(s)
	}
	return n, nil
}

// badTokenError is ParseToken's error: its text without ErrBadToken's
// prefix (callers add the key it came from), matched by errors.Is.
type badTokenError string

func (e badTokenError) Error() string {
	return strconv.Quote(string(e)) + " is not a valid token (accepted: a decimal number >= 1, or auto)"
}

// Is reports ErrBadToken, so that the error maps to EINVAL.
func (e badTokenError) Is(target error) bool { return target == ErrBadToken }
