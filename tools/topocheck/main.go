// Command topocheck validates topology files the way every component will read
// them, and prints a one-line summary of each.
//
//	topocheck FILE...
//
// Exit status 0 when every file is valid, 2 otherwise (the error names the
// field and value).
package main

import (
	"fmt"
	"os"

	"github.com/robinhoodcache/robinhood/lib/config"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] == "-h" || os.Args[1] == "--help" {
		fmt.Fprintln(os.Stderr, "usage: topocheck FILE...")
		os.Exit(2)
	}
	status := 0
	for _, path := range os.Args[1:] {
		t, err := config.LoadTopology(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			status = 2
			continue
		}
		fmt.Printf("%s: %d backends, %d app servers\n", path, len(t.Backends), len(t.AppServers))
	}
	os.Exit(status)
}
