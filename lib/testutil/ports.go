package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// A port handed out by listening on ":0" comes from the kernel's ephemeral
// range, the range it also draws the local ports of outgoing connections
// from: between "this port was free" and "the child process binds it", any
// connection a running process opens may take it, and the child fails with
// "address already in use". FreeAddr therefore picks ports below the
// ephemeral range, where the kernel never hands one out on its own, as the
// Python tests and the testbed do (robinhood_common/ports.py). Each test
// process walks the range from a random start, one port after the other, so
// packages tested in parallel only meet if their walks overlap.

const (
	portRangeFile = "/proc/sys/net/ipv4/ip_local_port_range"
	portLowFloor  = 10000 // clear of well-known and registered service ports
	portWidth     = 20000
)

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
	portsNext  = -1 // this process's next candidate, an offset into the range
)

// listenRange returns the ports [low, high) below the ephemeral range whose
// low end is given in rangeFile's text, or (0, 0) when there is no room below
// it or the text cannot be read.
func listenRange(text string) (int, int) {
	fields := strings.Fields(text)
	if len(fields) == 0 {
		return 0, 0
	}
	low, err := strconv.Atoi(fields[0])
	if err != nil {
		return 0, 0
	}
	start := max(portLowFloor, low-portWidth)
	if low-start < 1000 {
		return 0, 0
	}
	return start, low
}

func bindable(port int) bool {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func kernelPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreeAddr returns a loopback address whose port was free a moment ago,
// below the kernel's ephemeral range where possible and never the same
// twice in this test process.
func FreeAddr(t testing.TB) string {
	t.Helper()
	text, _ := os.ReadFile(portRangeFile)
	low, high := listenRange(string(text))
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 200 {
		port := 0
		if high > 0 {
			if portsNext < 0 {
				portsNext = rand.IntN(high - low)
			}
			port = low + portsNext%(high-low)
			portsNext++
		} else {
			p, err := kernelPort()
			if err != nil {
				t.Fatal(err)
			}
			port = p
		}
		if !portsGiven[port] && bindable(port) {
			portsGiven[port] = true
			return fmt.Sprintf("127.0.0.1:%d", port)
		}
	}
	t.Fatal("no free loopback port found in 200 tries")
	return ""
}
