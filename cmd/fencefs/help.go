package main

// The help of a command lists its flags in groups, the essential ones
// first, wrapped to helpWidth columns, instead of pflag's one alphabetical
// list of lines as long as their usage.

import (
	"strings"

	"github.com/fencefs/fencefs/config"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// helpWidth is the width the flag descriptions are wrapped to.
const helpWidth = 80

// essentialFlags are listed first, in this order: what a first mount (or
// fencefs run) needs.
var essentialFlags = []string{"lease", "mount", "endpoint", "token", "token-file", "foreground", "read-only", "config", config.FlagOptions}

// flagGroups are the other groups, in order, by the configuration group of
// each flag's setting; flags of no setting come last, under "Other flags".
var flagGroups = []struct {
	title string
	group config.Group
}{
	{"Fencing flags", config.GroupFence},
	{"S3 flags", config.GroupS3},
	{"Mount flags", config.GroupMount},
	{"Logging and metrics flags", config.GroupLog | config.GroupMetrics},
}

// usageTemplate is cobra's default, with the flags in groups.
const usageTemplate = `Usage:{{if .Runnable}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} [command]{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Available Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{groupedFlags .}}{{if .HasAvailableSubCommands}}

Use "{{.CommandPath}} [command] --help" for more information about a command.{{end}}
`

func init() { cobra.AddTemplateFunc("groupedFlags", groupedFlags) }

// groupedFlags renders the visible flags of c (its own and inherited) in
// groups, each section headed by a blank line and its title.
func groupedFlags(c *cobra.Command) string {
	all := pflag.NewFlagSet(c.Name(), pflag.ContinueOnError)
	all.SortFlags = false
	c.LocalFlags().VisitAll(func(f *pflag.Flag) { all.AddFlag(f) })
	c.InheritedFlags().VisitAll(func(f *pflag.Flag) {
		if all.Lookup(f.Name) == nil {
			all.AddFlag(f)
		}
	})
	groupOf := map[string]config.Group{}
	for _, s := range config.Settings() {
		if s.Flag != "" {
			groupOf[s.Flag] = s.Group
		}
	}
	placed := map[string]bool{}
	var b strings.Builder
	section := func(title string, names []string) {
		fs := pflag.NewFlagSet(title, pflag.ContinueOnError)
		fs.SortFlags = false
		for _, n := range names {
			if f := all.Lookup(n); f != nil && !f.Hidden && !placed[n] {
				fs.AddFlag(f)
				placed[n] = true
			}
		}
		if fs.HasFlags() {
			b.WriteString("\n\n" + title + ":\n" + strings.TrimRight(fs.FlagUsagesWrapped(helpWidth), " \n"))
		}
	}
	var names []string
	all.VisitAll(func(f *pflag.Flag) {
		if !f.Hidden {
			names = append(names, f.Name)
		}
	})
	if len(names) <= 8 {
		section("Flags", names) // few: one list
		return b.String()
	}
	section("Essential flags", essentialFlags)
	for _, g := range flagGroups {
		var in []string
		for _, n := range names {
			if groupOf[n]&g.group != 0 {
				in = append(in, n)
			}
		}
		section(g.title, in)
	}
	var coordinator []string
	for _, n := range names {
		if strings.HasPrefix(n, "etcd") || strings.HasPrefix(n, "zookeeper") {
			coordinator = append(coordinator, n)
		}
	}
	section("Coordinator flags (etcd, ZooKeeper)", coordinator)
	section("Other flags", names)
	return b.String()
}
