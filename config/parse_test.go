package config

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEverySettingFillsItsOwnFieldOfItsKind keeps the table's declared
// kinds and the Config fields in step: a mismatch would panic in fill.
func TestEverySettingFillsItsOwnFieldOfItsKind(t *testing.T) {
	want := map[kind]string{
		kindString: "*string", kindWord: "*string", kindPath: "*string", kindSecret: "*config.Secret",
		kindBool: "*bool", kindDuration: "*time.Duration", kindInt: "*int", kindUint32: "*uint32", kindMode: "*fs.FileMode",
	}
	var c Config
	fields := map[any]string{}
	for _, s := range settings {
		if s.to == nil {
			if !strings.HasPrefix(s.Key, "etcd.") && !strings.HasPrefix(s.Key, "zookeeper.") && !strings.HasPrefix(s.Key, "kubernetes.") {
				t.Errorf("%s fills no Config field", s.Key)
			}
			continue
		}
		p := s.to(&c)
		if got := fmt.Sprintf("%T", p); got != want[s.kind] {
			t.Errorf("%s: field of type %s, kind wants %s", s.Key, got, want[s.kind])
		}
		if other, dup := fields[p]; dup {
			t.Errorf("%s and %s fill the same field", s.Key, other)
		}
		fields[p] = s.Key
	}
}

func TestValuesAreParsedByTheirDeclaredKind(t *testing.T) {
	tests := []struct {
		name string
		args []string
		get  func(*Config) any
		want any
	}{
		{"word is lower-cased", []string{"--fence-mode", "FAST"}, func(c *Config) any { return c.Fence.Mode }, "fast"},
		{"bool yes", []string{"-o", "path_style=yes"}, func(c *Config) any { return c.S3.PathStyle }, true},
		{"bare 0 is a duration", []string{"--refresh-interval", "0"}, func(c *Config) any { return c.Fence.RefreshInterval }, time.Duration(0)},
		{"int", []string{"--s3-concurrency", "9"}, func(c *Config) any { return c.S3.Concurrency }, 9},
		{"uint32 id 0 is kept", []string{"--uid", "0"}, func(c *Config) any { return c.Mount.UID }, uint32(0)},
		{"0o mode", []string{"--dir-mode", "0o700"}, func(c *Config) any { return c.Mount.DirMode }, os.FileMode(0o700)},
		{"path made absolute", []string{"--log-file", "x.log"}, func(c *Config) any { return filepath.IsAbs(c.Log.File) }, true},
		{"empty path stays empty", nil, func(c *Config) any { return c.Log.File }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(t, invocation{args: tt.args})
			if err != nil {
				t.Fatal(err)
			}
			if got := tt.get(c); got != tt.want {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}
