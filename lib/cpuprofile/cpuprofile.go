// Package cpuprofile starts the CPU profile a command's --cpuprofile flag
// asks for (read it with go tool pprof): one implementation for every
// command that has the flag.
package cpuprofile

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// Start profiles the process into the file at path until stop is called
// (path "": nothing is profiled, stop does nothing). The error names the
// --cpuprofile flag and the file.
func Start(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile %s: %w", path, err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
