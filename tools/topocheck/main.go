// Command topocheck validates topology and experiment files the way every
// component reads them (lib/config, against schema/), and prints a
// one-line summary of each; --normalized prints the document with every
// default filled in, as JSON. The files a topology names (token files,
// certificates, keys, password files) are read as the components read them
// where they exist on this machine (lib/auth.CheckTopologyFiles): a named
// pipe, /dev/zero or a key others may read there fails as it would fail the
// component.
//
//	topocheck [--experiment] [--normalized] FILE...
//
// Exit status 0 when every file is valid, 2 otherwise (the error names the
// field and value).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/robinhoodcache/robinhood/lib/auth"
	"github.com/robinhoodcache/robinhood/lib/config"
	"github.com/robinhoodcache/robinhood/schema"
)

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	fs := flag.NewFlagSet("topocheck", flag.ContinueOnError)
	experiment := fs.Bool("experiment", false, "the files are experiment files, not topologies")
	normalized := fs.Bool("normalized", false, "print each file normalized (defaults filled in) as JSON")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: topocheck [--experiment] [--normalized] FILE...")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // -h asked for the usage, which is printed
		}
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	status := 0
	for _, path := range fs.Args() {
		kind, target := "topology", schema.Topology
		if *experiment {
			kind, target = "experiment", schema.Experiment
		}
		b, err := config.ReadConfigFile(path)
		var norm any
		if err == nil {
			var doc any
			if doc, err = config.ParseYAML(b, kind); err == nil {
				norm, err = config.Default().Read(target, doc, "")
			}
			if err == nil && *experiment {
				_, err = config.ExperimentFrom(doc, filepath.Dir(path))
			} else if err == nil {
				_, err = config.TopologyFrom(doc)
			}
		}
		var absent []string
		if err == nil && !*experiment {
			var t *config.Topology
			if t, err = config.LoadTopology(path); err == nil { // its file paths made relative to its folder
				var problems []error
				if problems, absent = auth.CheckTopologyFiles(t); len(problems) > 0 {
					err = problems[0]
				}
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s %s: %v\n", kind, path, err)
			status = 2
			continue
		}
		if *normalized {
			out, _ := json.MarshalIndent(norm, "", " ")
			fmt.Println(string(out))
			continue
		}
		m := norm.(map[string]any)
		if *experiment {
			fmt.Printf("%s: experiment %s, %d backends\n", path, m["name"], len(m["backends"].([]any)))
		} else {
			fmt.Printf("%s: %d backends, %d app servers%s\n", path, len(m["backends"].([]any)), len(m["app_servers"].([]any)), absentNote(absent))
		}
	}
	return status
}

// absentNote says which files the topology names that are not on this
// machine (and so were not checked); "" when there are none.
func absentNote(absent []string) string {
	switch len(absent) {
	case 0:
		return ""
	case 1:
		return fmt.Sprintf(" (%s is not here: not checked)", absent[0])
	}
	return fmt.Sprintf(" (%d files it names are not here, not checked: %s, …)", len(absent), absent[0])
}
