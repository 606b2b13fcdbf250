// Command devcerts writes a self-contained set of credentials for a test
// or a first deployment (docs/security.md): a CA, one certificate for the
// servers and clients, a token per caller and the servers' token file.
// Each caller's token is written twice: CALLER.token holds its "name token"
// line (what the project's clients read) and CALLER.bearer the token alone
// (what Prometheus's credentials_file and curl send).
//
//	devcerts --out DIR [--hosts rbc,backend-0,...] [--callers app0,operator,...]
//
// Production deployments should issue certificates from their own CA and
// keep tokens in their secret store; these files are for getting started.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/robinhoodcache/robinhood/lib/auth"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("devcerts", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "folder to write ca.pem, cert.pem, key.pem, tokens, CALLER.token and CALLER.bearer into (required)")
	hosts := fs.String("hosts", "", "comma-separated host names or IPs the certificate is valid for, besides localhost and loopback")
	callers := fs.String("callers", "app0,operator,prometheus", "comma-separated callers to make tokens for")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0 // -h asked for the usage, which is printed
		}
		return 2
	}
	if *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "devcerts: --out DIR is required (and no arguments)")
		return 2
	}
	split := func(s string) []string {
		var r []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				r = append(r, p)
			}
		}
		return r
	}
	if err := auth.WriteDev(*out, split(*hosts), split(*callers)); err != nil {
		fmt.Fprintf(stderr, "devcerts: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "wrote %s: %s, %s, %s, %s, and per caller CALLER%s (\"name token\", for the project's clients) and CALLER%s (the bare token, for Prometheus and curl)\n",
		*out, auth.DevCA, auth.DevCert, auth.DevKey, auth.DevTokens, auth.DevTokenSuffix, auth.DevBearerSuffix)
	return 0
}
