package mrc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/robinhoodcache/robinhood/lib/trace"
)

// /dev/zero (one endless line) is refused as what it is, a device, before
// anything is read; an endless line in a regular file is refused by the line
// reader's bound (lib/trace).
func TestEachRequestRefusesDevZero(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero on this system")
	}
	err := EachRequest("/dev/zero", func(*trace.Request) { t.Fatal("a request out of /dev/zero") })
	if err == nil || err.Error() != "open /dev/zero: a character device, not a regular file" {
		t.Fatalf("err %v", err)
	}
}

func TestEachRequestNamesTheMalformedLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "t.jsonl")
	good := `{"t": 0, "d": [{"a": {"S": [1], "U": ["k"], "C": [1]}}]}`
	if err := os.WriteFile(p, []byte(good+"\n\n"+good+"\r\n{\"t\": 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := EachRequest(p, func(*trace.Request) { n++ })
	if n != 2 || err == nil || !strings.Contains(err.Error(), "t.jsonl: line 4: d: missing") {
		t.Fatalf("%d requests, err %v", n, err)
	}
}
