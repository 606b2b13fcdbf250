// Command topocheck validates topology and experiment files the way every
// component reads them (lib/config, against schema/), and prints a
// one-line summary of each; --normalized prints the document with every
// default filled in, as JSON.
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
			fmt.Printf("%s: %d backends, %d app servers\n", path, len(m["backends"].([]any)), len(m["app_servers"].([]any)))
		}
	}
	return status
}
