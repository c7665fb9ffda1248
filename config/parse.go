package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// fill parses every setting of the table that has a Config field, by its
// declared kind, into c. It returns the first bad value as an *Error naming
// the key and the accepted values.
func (l *loader) fill(c *Config) error {
	for _, s := range settings {
		if s.to == nil {
			continue
		}
		if msg := l.parse(s, s.to(c)); msg != "" {
			return keyErr(s.Key, "%s", msg)
		}
	}
	return nil
}

// parse stores the value of s into dst, a pointer of s.kind's type, and
// returns "" or what is wrong with the value.
func (l *loader) parse(s Setting, dst any) string {
	raw := strings.TrimSpace(l.v.GetString(s.Key))
	switch s.kind {
	case kindString:
		*dst.(*string) = raw
	case kindWord:
		*dst.(*string) = strings.ToLower(raw)
	case kindPath:
		if raw != "" {
			abs, err := filepath.Abs(raw)
			if err != nil {
				return err.Error()
			}
			raw = abs
		}
		*dst.(*string) = raw
	case kindSecret:
		*dst.(*Secret) = Secret(raw)
	case kindBool:
		switch strings.ToLower(raw) {
		case "true", "1", "yes", "on":
			*dst.(*bool) = true
		case "false", "0", "no", "off", "":
			*dst.(*bool) = false
		default:
			return fmt.Sprintf("%q is not a boolean (accepted: true, false)", raw)
		}
	case kindDuration:
		d, err := time.ParseDuration(raw)
		if n, nerr := strconv.ParseInt(raw, 10, 64); err != nil && (nerr != nil || n != 0) {
			return fmt.Sprintf("%q is not a duration (accepted: a number with a unit, such as 500ms, 1s, 15m)", raw)
		}
		*dst.(*time.Duration) = d
	case kindInt:
		n, err := strconv.Atoi(raw)
		if err != nil && raw != "" {
			return fmt.Sprintf("%q is not a number (accepted: a decimal number)", raw)
		}
		*dst.(*int) = n
	case kindUint32:
		if raw == "" {
			return ""
		}
		n, err := strconv.ParseUint(raw, 10, 32)
		if err != nil {
			return fmt.Sprintf("%q is not a numeric id (accepted: a decimal number 0 to 4294967295)", raw)
		}
		*dst.(*uint32) = uint32(n)
	case kindMode:
		return l.parseMode(s.Key, raw, dst.(*os.FileMode))
	default:
		panic(fmt.Sprintf("config: setting %s has no kind %d", s.Key, s.kind))
	}
	return ""
}

// parseMode reads a permission mode: an octal string, or a YAML number
// (0644 in YAML is already octal, so its value is taken as is).
func (l *loader) parseMode(key, raw string, dst *os.FileMode) string {
	switch n := l.v.Get(key).(type) {
	case int, int64, uint64, uint32, int32:
		v, _ := strconv.ParseInt(fmt.Sprint(n), 10, 64)
		if v < 0 || v > 0o777 {
			return fmt.Sprintf("%d is not a permission mode (accepted: an octal string such as \"0644\"; quote it in YAML)", v)
		}
		*dst = os.FileMode(v)
		return ""
	}
	v, err := strconv.ParseUint(strings.TrimPrefix(raw, "0o"), 8, 32)
	if err != nil || v > 0o777 {
		return fmt.Sprintf("%q is not a permission mode (accepted: octal 0000 to 0777, such as 0644)", raw)
	}
	*dst = os.FileMode(v)
	return ""
}
