package synth

import (
	"testing"

	"github.com/robinhoodcache/robinhood/lib/trace"
)

// BenchmarkSynth measures onerf synthesis with the defaults, drawing plus
// writing the line, after start-up (ns/op is per request).
func BenchmarkSynth(b *testing.B) {
	g, err := New(DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	var line []byte
	var bytes int64
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		line = trace.AppendJSON(line[:0], g.Next())
		bytes += int64(len(line)) + 1
	}
	b.ReportMetric(float64(bytes)/float64(b.N), "B/line")
}

// BenchmarkNew measures start-up: fitting the mix and building the tables
// of 20 backends × 100,000 keys.
func BenchmarkNew(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if _, err := New(DefaultOptions()); err != nil {
			b.Fatal(err)
		}
	}
}
