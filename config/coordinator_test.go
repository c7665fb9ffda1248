package config

import (
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func TestCoordinatorPasswordsAreNeverAFlagNorPrinted(t *testing.T) {
	for _, tc := range []struct {
		group    Group
		fileFlag string
		value    any // the settings, printed by value
		secrets  []string
	}{
		{GroupEtcd, "etcd-password-file", Etcd{Username: "u", Password: "hunter2"}, (&Etcd{Username: "u", Password: "hunter2"}).Secrets()},
		{GroupZooKeeper, "zookeeper-password-file", ZooKeeper{Username: "u", Password: "hunter2"}, (&ZooKeeper{Username: "u", Password: "hunter2"}).Secrets()},
	} {
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		RegisterFlags(fs, tc.group)
		fs.VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Name, "password") && f.Name != tc.fileFlag {
				t.Errorf("flag --%s would put a password in argv", f.Name)
			}
		})
		v := tc.value
		if s := fmt.Sprintf("%v %+v %#v", v, v, v); strings.Contains(s, "hunter2") {
			t.Errorf("printed: %s", s)
		}
		if got := tc.secrets; len(got) != 1 || got[0] != "hunter2" {
			t.Errorf("%T.Secrets = %q; want the password, for redaction", v, got)
		}
	}
	if d := (&ZooKeeper{Username: "u", Password: "hunter2"}).Digest(); d != "u:hunter2" {
		t.Errorf("Digest = %q; want user:password", d)
	}
}
