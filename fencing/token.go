package fencing

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// MaxToken is the largest fencing token: 2^63-1, the largest signed 64-bit
// integer. Every coordinator's token fits below it (an etcd revision and a
// ZooKeeper zxid are int64s; the S3 lease binds auto), and so does every
// epoch in any tool that reads the register as a signed integer. Nothing
// binds above it: ParseToken refuses a larger number, Bind refuses one from
// any other source, and an auto bind (or `fencefs epoch raise auto`) on a
// register at MaxToken fails with ErrTokensSpent instead of wrapping round.
// docs/DESIGN.md §5 says what an operator does then.
const MaxToken uint64 = math.MaxInt64

// ErrTokensSpent: an auto bind found the register (or a reservation, or
// the token this Guard holds) at MaxToken, so no token above every earlier
// one exists. It wraps ErrBadToken (the token can never bind); a mount
// answers the setxattr that asked for it with EOVERFLOW.
var ErrTokensSpent = fmt.Errorf("%w: the fence domain's token space is spent", ErrBadToken)

// TokenAuto is the text that asks Bind for the register's newest epoch + 1
// (Bind's token 0).
const TokenAuto = "auto"

// ParseToken parses a fencing token as a user writes it (--token, a token
// file, the user.fencefs.token attribute, `fencefs epoch raise`): a decimal
// epoch from 1 to MaxToken, or TokenAuto, which returns 0 (Bind's auto).
// Surrounding blanks and a trailing newline are ignored. A number above
// MaxToken is an error that wraps ErrBadToken and reads `token N is above
// the largest token, 9223372036854775807`; anything else, the empty text
// included, reads `"x" is not a valid token (accepted: a decimal number >=
// 1, or auto)`. Both are one line.
func ParseToken(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	if s == TokenAuto {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if errors.Is(err, strconv.ErrRange) || (err == nil && n > MaxToken) {
		return 0, tooLargeError(s)
	}
	if err != nil || n == 0 {
		return 0, badTokenError(s)
	}
	return n, nil
}

// checkTokenRange refuses a token above MaxToken, whatever its source.
func checkTokenRange(token uint64) error {
	if token > MaxToken {
		return tooLargeError(strconv.FormatUint(token, 10))
	}
	return nil
}

// tooLargeError is the refusal of a decimal token above MaxToken.
type tooLargeError string

func (e tooLargeError) Error() string {
	return "token " + string(e) + " is above the largest token, " + strconv.FormatUint(MaxToken, 10)
}

// Is reports ErrBadToken, so that the error maps to EINVAL.
func (e tooLargeError) Is(target error) bool { return target == ErrBadToken }

// badTokenError is ParseToken's error: its text without ErrBadToken's
// prefix (callers add the key it came from), matched by errors.Is.
type badTokenError string

func (e badTokenError) Error() string {
	return strconv.Quote(string(e)) + " is not a valid token (accepted: a decimal number >= 1, or auto)"
}

// Is reports ErrBadToken, so that the error maps to EINVAL.
func (e badTokenError) Is(target error) bool { return target == ErrBadToken }
