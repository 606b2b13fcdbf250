package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/robinhoodcache/robinhood/lib/testutil"
	"github.com/robinhoodcache/robinhood/lib/trace"
	"github.com/robinhoodcache/robinhood/workload/synth"
)

// synthArgs are the request structure of the import tests: three backends,
// some uncacheable keys (so the C flags are not all 1).
var synthArgs = []string{"--requests", "300", "--backend-names", "b1,b2,b3", "--seed", "5", "--queries-per-request", "6",
	"--keys", "500", "--uncacheable", "0.2", "--mean-size", "3000", "--max-size", "100000"}

// keysizeStream writes n records "k<i> [size]": every third has no size,
// some keys repeat, one size is above --max-size.
func keysizeStream(t *testing.T, dir string, n int) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# a test stream\n")
	for i := range n {
		k := i % (n/3 + 1)
		switch {
		case i == 7:
			fmt.Fprintf(&b, "k%d 999999999\n", k)
		case k%3 == 0:
			fmt.Fprintf(&b, "k%d\n", k)
		default:
			fmt.Fprintf(&b, "k%d %d\n", k, 100+k)
		}
	}
	p := filepath.Join(dir, "keys.txt")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func arcStream(t *testing.T, dir string, n int) string {
	t.Helper()
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "%d %d 0 %d\n", 1000+i%97, 1+i%9, i)
	}
	p := filepath.Join(dir, "s.lis")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func readTrace(t *testing.T, path string) []*trace.Request {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []*trace.Request
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		r, err := trace.Parse(sc.Bytes())
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, r)
	}
	return out
}

// The import is tracegen synth's trace with the streamed backends' keys and
// sizes replaced, in order, by the streams' records; the other backends, the
// arrival times, fan-out and cacheable flags are synth's, byte for byte.
func TestImportReplacesOnlyTheStreamedKeys(t *testing.T) {
	dir := t.TempDir()
	ks, arc := keysizeStream(t, dir, 3000), arcStream(t, dir, 3000)
	synthOut, importOut := filepath.Join(dir, "synth.jsonl"), filepath.Join(dir, "import.jsonl")
	if code, _, stderr := tg(append([]string{"synth", "--out", synthOut}, synthArgs...)...); code != 0 {
		t.Fatalf("synth: %s", stderr)
	}
	code, _, stderr := tg(append([]string{"import", "--out", importOut, "--stream", "b1=" + ks, "--stream", "b3=" + arc + ",skip=10"}, synthArgs...)...)
	if code != 0 {
		t.Fatalf("import: %s", stderr)
	}
	if !strings.Contains(stderr, "format_b1=keysize") || !strings.Contains(stderr, "format_b3=arc") {
		t.Fatalf("the log does not say the detected formats: %s", stderr)
	}
	want, got := readTrace(t, synthOut), readTrace(t, importOut)
	if len(got) != 300 || len(want) != 300 {
		t.Fatalf("%d and %d requests, want 300", len(got), len(want))
	}
	// The streams' records, in order.
	type rec struct {
		key  string
		size int64 // -1: none
	}
	var ksRecs, arcRecs []rec
	for i := range 3000 {
		k := i % 1001
		switch {
		case i == 7:
			ksRecs = append(ksRecs, rec{fmt.Sprintf("k%d", k), 100000}) // capped at --max-size
		case k%3 == 0:
			ksRecs = append(ksRecs, rec{fmt.Sprintf("k%d", k), -1})
		default:
			ksRecs = append(ksRecs, rec{fmt.Sprintf("k%d", k), int64(100 + k)})
		}
		if i >= 10 {
			arcRecs = append(arcRecs, rec{fmt.Sprint(1000 + i%97), int64(1+i%9) * 512})
		}
	}
	o, err := synth.ParseArgs(synthArgs[2:])
	if err != nil {
		t.Fatal(err)
	}
	g, err := synth.New(o)
	if err != nil {
		t.Fatal(err)
	}
	next := map[string]int{}
	streams := map[string][]rec{"b1": ksRecs, "b3": arcRecs}
	for i := range got {
		w, r := want[i], got[i]
		if r.T != w.T || r.TsMs != w.TsMs || r.HasTs != w.HasTs || len(r.Layers) != len(w.Layers) {
			t.Fatalf("request %d: %+v, synth wrote %+v", i, r, w)
		}
		for li := range w.Layers {
			if len(r.Layers[li]) != len(w.Layers[li]) {
				t.Fatalf("request %d layer %d: %d backends, synth %d", i, li, len(r.Layers[li]), len(w.Layers[li]))
			}
			for bi := range w.Layers[li] {
				wq, q := &w.Layers[li][bi], &r.Layers[li][bi]
				if q.Backend != wq.Backend || q.Len() != wq.Len() || fmt.Sprint(q.Cacheable) != fmt.Sprint(wq.Cacheable) {
					t.Fatalf("request %d: batch %+v, synth %+v", i, q, wq)
				}
				recs, streamed := streams[q.Backend]
				if !streamed {
					if fmt.Sprint(q.Keys, q.Sizes) != fmt.Sprint(wq.Keys, wq.Sizes) {
						t.Fatalf("request %d: backend %s has no stream but its batch changed: %+v, synth %+v", i, q.Backend, q, wq)
					}
					continue
				}
				for j, k := range q.Keys {
					want := recs[next[q.Backend]]
					next[q.Backend]++
					size := want.size
					if size < 0 {
						size, _ = g.SizeOf(q.Backend, want.key)
					}
					if k != want.key || q.Sizes[j] != size {
						t.Fatalf("request %d: %s query %d is (%s, %d), want record %d (%s, %d)", i, q.Backend, j, k, q.Sizes[j], next[q.Backend]-1, want.key, size)
					}
				}
			}
		}
	}
	if next["b1"] == 0 || next["b3"] == 0 {
		t.Fatalf("no streamed queries: %v", next)
	}
	// stats and mrc read the imported trace.
	code, out, stderr := tg("stats", importOut)
	if code != 0 || !strings.Contains(out, "requests 300,") {
		t.Fatalf("stats: %d %s %s", code, out, stderr)
	}
	code, out, stderr = tg("mrc", importOut, "--sizes", "4KiB,64KiB,1MiB", "--format", "csv")
	if code != 0 || !strings.Contains(out, "b1,65536,") || !strings.Contains(out, "b3,1048576,") {
		t.Fatalf("mrc: %d %s %s", code, out, stderr)
	}
}

func TestImportIsDeterministic(t *testing.T) {
	dir := t.TempDir()
	ks := keysizeStream(t, dir, 3000)
	var outs [][]byte
	for _, name := range []string{"a.jsonl", "b.jsonl"} {
		out := filepath.Join(dir, name)
		if code, _, stderr := tg(append([]string{"import", "--out", out, "--stream", "b2=" + ks + ",format=keysize,skip=3"}, synthArgs...)...); code != 0 {
			t.Fatalf("import: %s", stderr)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, b)
	}
	if !bytes.Equal(outs[0], outs[1]) || bytes.Count(outs[0], []byte("\n")) != 300 {
		t.Fatal("the same flags and files gave different traces")
	}
	// One file feeds two backends from different offsets.
	out := filepath.Join(dir, "two.jsonl")
	if code, _, stderr := tg(append([]string{"import", "--out", out, "--stream", "b1=" + ks, "--stream", "b2=" + ks + ",skip=1000"}, synthArgs...)...); code != 0 {
		t.Fatalf("import: %s", stderr)
	}
	first := map[string]string{}
	for _, r := range readTrace(t, out) {
		for _, q := range r.Layers[0] {
			if _, ok := first[q.Backend]; !ok && q.Len() > 0 {
				first[q.Backend] = q.Keys[0]
			}
		}
	}
	if first["b1"] != "k0" || first["b2"] != "k1000" { // record 1000 is k(1000 % 1001)
		t.Fatalf("first keys %v, want b1 k0 and b2 k1000", first)
	}
}

// Every failure leaves nothing at --out (not even a partial trace, nor the
// temporary file).
func TestImportErrorsLeaveNothingAtOut(t *testing.T) {
	dir := t.TempDir()
	ks := keysizeStream(t, dir, 3000)
	short := filepath.Join(dir, "short.txt")
	if err := os.WriteFile(short, []byte("a 1\nb 2\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.lis")
	if err := os.WriteFile(bad, []byte("1 1 0 0\n2 x 0 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Past the records the run uses: a malformed last line, and a zstd
	// stream cut short. A stream is read as far as the run needs, no
	// further: these are not met (TestImportReadsNoFurtherThanItNeeds).
	tail := filepath.Join(dir, "tail.txt")
	ksText, _ := os.ReadFile(ks)
	if err := os.WriteFile(tail, append(ksText, "a 1 2\n"...), 0o644); err != nil {
		t.Fatal(err)
	}
	arcText, _ := os.ReadFile(arcStream(t, dir, 20000))
	var z bytes.Buffer
	zw, err := zstd.NewWriter(&z)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(arcText)
	zw.Close()
	cut := filepath.Join(dir, "cut.lis.zst")
	if err := os.WriteFile(cut, z.Bytes()[:z.Len()*3/5], 0o644); err != nil {
		t.Fatal(err)
	}
	outDir := t.TempDir()
	out := filepath.Join(outDir, "t.jsonl")
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--stream", "b1=" + short}, "stream " + short + " (backend b1) ran out: it has 3 records (3 after skip=0), the run needs "},
		{[]string{"--stream", "b1=" + ks + ",skip=2999"}, "(1 after skip=2999), the run needs "},
		{[]string{"--stream", "b9=" + ks}, `--stream b9=` + ks + `: the trace has no backend "b9" (backends: b1,b2,b3; --backend-names names them)`},
		{[]string{"--stream", "b1=" + bad}, bad + `:2: field 2 "x" is not a block count`},
		{[]string{"--stream", "b1=" + ks + ",format=lis"}, `format "lis" is not one of arc, fetchers, keysize`},
		{[]string{"--stream", "b1=" + ks + ",skip=-1"}, `skip=-1 is not a number of records`},
		{[]string{"--stream", "b1=" + ks + ",color=red"}, `unknown option "color" (known: format, skip)`},
		{[]string{"--stream", "b1=" + ks, "--stream", "b1=" + ks}, "backend b1 already has a stream"},
		{[]string{"--stream", "b1=" + filepath.Join(dir, "missing.txt")}, "missing.txt: no such file or directory"},
		{[]string{"--stream", "b1=" + ks + ",skip=5000"}, ks + ": skip=5000: the stream has only 3000 records"},
		{nil, "give at least one --stream BACKEND=FILE"},
	}
	for _, c := range cases {
		code, _, stderr := tg(append(append([]string{"import", "--out", out}, c.args...), synthArgs...)...)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("import %v: exit %d, stderr %q; want %q", c.args, code, stderr, c.want)
		}
		if left, _ := os.ReadDir(outDir); len(left) != 0 {
			t.Fatalf("import %v failed but left %v in the output folder", c.args, left)
		}
	}
	// The run uses neither the malformed last line nor the cut end: both
	// import, and the trace is the one the intact streams give.
	for _, s := range []struct{ damaged, intact string }{{tail, ks}, {cut, arcStream(t, t.TempDir(), 20000)}} {
		var traces [2][]byte
		for i, file := range []string{s.damaged, s.intact} {
			code, stdout, stderr := tg(append([]string{"import", "--stream", "b1=" + file}, synthArgs...)...)
			if code != 0 {
				t.Fatalf("import of %s: %s", file, stderr)
			}
			traces[i] = []byte(stdout)
		}
		if !bytes.Equal(traces[0], traces[1]) {
			t.Fatalf("%s: the trace differs from the intact stream's", s.damaged)
		}
	}
	// The short stream's message says how many records the run needs: the
	// queries synth sends b1.
	_, _, stderr := tg(append([]string{"import", "--out", out, "--stream", "b1=" + short}, synthArgs...)...)
	o, _ := synth.ParseArgs(synthArgs[2:])
	g, _ := synth.New(o)
	var need int64
	if _, err := g.Each(synth.Limit{Requests: 300}, func(r *trace.Request) error {
		for _, q := range r.Layers[0] {
			if q.Backend == "b1" {
				need += int64(q.Len())
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, fmt.Sprintf("the run needs %d (its queries to b1); give a shorter --duration or --requests, a smaller skip, or a longer stream", need)) {
		t.Fatalf("short stream: %s (want the need %d)", stderr, need)
	}
}

// Not a trace or not a key stream — /dev/zero, one endless line — is
// refused before anything is read by stats, mrc and import: it is a device,
// not a regular file (an endless line in a regular file meets the line
// readers' bounds: lib/trace, workload/keystream).
func TestDevZeroIsRefused(t *testing.T) {
	if _, err := os.Stat("/dev/zero"); err != nil {
		t.Skip("no /dev/zero")
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"stats", "/dev/zero"}, "tracegen stats: open /dev/zero: a character device, not a regular file\n"},
		{[]string{"mrc", "/dev/zero"}, "tracegen mrc: open /dev/zero: a character device, not a regular file\n"},
		{append([]string{"import", "--stream", "b1=/dev/zero"}, synthArgs...), "tracegen import: --stream b1=/dev/zero: open /dev/zero: a character device, not a regular file\n"},
	} {
		code, _, stderr := tg(c.args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("tracegen %v: exit %d, %q; want %q", c.args, code, stderr, c.want)
		}
	}
}

// SIGTERM or SIGINT while an import writes --out leaves nothing behind:
// not the temporary file beside it, not a partial --out.
func TestImportInterruptedLeavesNothing(t *testing.T) {
	bin := testutil.Binary(t, "./experiment/cmd/tracegen")
	dir := t.TempDir()
	var text strings.Builder
	for i := range 2_000_000 {
		fmt.Fprintf(&text, "k%d\n", i%1000)
	}
	var z bytes.Buffer
	zw, err := zstd.NewWriter(&z)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write([]byte(text.String()))
	zw.Close()
	stream := filepath.Join(dir, "keys.zst")
	if err := os.WriteFile(stream, z.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		outDir := t.TempDir()
		// Long enough (a million requests) that it is still writing when
		// the signal comes; it stops at the signal.
		p := testutil.Start(t, bin, "import", "--requests", "1000000", "--backend-names", "b1,b2", "--queries-per-request", "2",
			"--keys", "1000", "--seed", "1", "--stream", "b1="+stream, "--out", filepath.Join(outDir, "t.jsonl"))
		deadline := time.Now().Add(60 * time.Second)
		for {
			if left, _ := os.ReadDir(outDir); len(left) > 0 {
				break
			}
			if p.Exited() || time.Now().After(deadline) {
				t.Fatalf("no temporary file appeared in %s", outDir)
			}
			time.Sleep(5 * time.Millisecond)
		}
		p.Signal(sig)
		err, ok := p.Wait(60 * time.Second)
		var exit *exec.ExitError
		if !ok || !errors.As(err, &exit) || exit.ExitCode() != 128+int(sig) {
			t.Fatalf("%v: exit %v (ended: %v), want status %d", sig, err, ok, 128+int(sig))
		}
		if left, _ := os.ReadDir(outDir); len(left) != 0 {
			t.Fatalf("%v: left %v in the output folder", sig, left)
		}
		if !strings.Contains(p.Output(), "while writing "+filepath.Join(outDir, "t.jsonl")+": stopped, nothing written there") {
			t.Fatalf("%v: output %q", sig, p.Output())
		}
	}
}
