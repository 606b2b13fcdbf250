// Command mcload is a look-aside load generator for one memcached instance,
// used by the controller's shrink benchmark (docs/benchmarks.md, Controller):
// workers get random keys at a fixed total rate and, like an application
// server filling its cache, set the value on a miss.
//
// Usage:
//
//	mcload --addr 127.0.0.1:11211 --rate 12000 --workers 8 --keys 400000
//	       --value-size 4096 [--fill] [--duration 0] [--report 1s] [--seed 1]
//
// --fill writes every key once before the load starts (so a cache smaller
// than keys × value-size ends up full). --rate 0 sends as fast as memcached
// answers. Every --report interval, and at the end, one line is printed:
//
//	t=3.0s gets=36012 rate=12004/s hit_ratio=0.612 sets=13972 errors=0
//
// It runs until --duration has passed (0: until SIGINT/SIGTERM).
// Exit status: 0 done, 1 memcached failed, 2 invalid flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/bradfitz/gomemcache/memcache"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// options are the command-line flags.
type options struct {
	addr      string
	rate      float64
	workers   int
	keys      int
	valueSize int
	fill      bool
	duration  time.Duration
	report    time.Duration
	seed      uint64
}

func parse(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("mcload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.addr, "addr", "127.0.0.1:11211", "memcached address")
	fs.Float64Var(&o.rate, "rate", 12000, "gets per second over all workers (0: as fast as possible)")
	fs.IntVar(&o.workers, "workers", 8, "concurrent workers, one connection each")
	fs.IntVar(&o.keys, "keys", 400000, "key space (uniformly random keys)")
	fs.IntVar(&o.valueSize, "value-size", 4096, "bytes per value")
	fs.BoolVar(&o.fill, "fill", false, "write every key once before the load")
	fs.DurationVar(&o.duration, "duration", 0, "how long to run (0: until a signal)")
	fs.DurationVar(&o.report, "report", time.Second, "interval between progress lines")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case o.rate < 0:
		return o, fmt.Errorf("--rate %v must not be negative", o.rate)
	case o.workers < 1:
		return o, fmt.Errorf("--workers %d must be at least 1", o.workers)
	case o.keys < 1:
		return o, fmt.Errorf("--keys %d must be at least 1", o.keys)
	case o.valueSize < 1 || o.valueSize > 1000*1000:
		return o, fmt.Errorf("--value-size %d must be in 1..1000000", o.valueSize)
	case o.report <= 0:
		return o, fmt.Errorf("--report %v must be positive", o.report)
	case o.duration < 0:
		return o, fmt.Errorf("--duration %v must not be negative", o.duration)
	}
	return o, nil
}

// counters are shared by the workers.
type counters struct {
	gets, hits, sets, errs atomic.Int64
}

func key(i int) string { return fmt.Sprintf("mcload:%09d", i) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "mcload:", err)
		return 2
	}
	mc := memcache.New(o.addr)
	mc.MaxIdleConns = o.workers
	mc.Timeout = 2 * time.Second
	value := make([]byte, o.valueSize)
	for i := range value {
		value[i] = byte('a' + i%26)
	}
	if err := mc.Ping(); err != nil {
		fmt.Fprintf(stderr, "mcload: memcached at %s: %v\n", o.addr, err)
		return 1
	}
	if o.fill {
		if err := fill(ctx, mc, o, value); err != nil {
			fmt.Fprintf(stderr, "mcload: fill: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "filled keys=%d bytes=%d\n", o.keys, o.keys*o.valueSize)
	}
	if o.duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	var c counters
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < o.workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			work(ctx, mc, o, value, uint64(w), &c)
		}(w)
	}
	reportLoop(ctx, stdout, o.report, start, &c)
	wg.Wait()
	line(stdout, start, &c)
	if c.gets.Load() == 0 && c.errs.Load() > 0 {
		return 1
	}
	return 0
}

// fill sets every key once, the workers splitting the key space.
func fill(ctx context.Context, mc *memcache.Client, o options, value []byte) error {
	var wg sync.WaitGroup
	errc := make(chan error, o.workers)
	for w := 0; w < o.workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := w; i < o.keys; i += o.workers {
				if ctx.Err() != nil {
					return
				}
				if err := mc.Set(&memcache.Item{Key: key(i), Value: value}); err != nil {
					errc <- err
					return
				}
			}
		}(w)
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		return err
	}
	return ctx.Err()
}

// work gets random keys at rate/workers per second and sets the misses.
func work(ctx context.Context, mc *memcache.Client, o options, value []byte, w uint64, c *counters) {
	rnd := rand.New(rand.NewPCG(o.seed, w))
	var period time.Duration
	if o.rate > 0 {
		period = time.Duration(float64(time.Second) * float64(o.workers) / o.rate)
	}
	next := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for ctx.Err() == nil {
		if period > 0 {
			next = next.Add(period)
			if d := time.Until(next); d > 0 {
				timer.Reset(d)
				select {
				case <-ctx.Done():
					return
				case <-timer.C:
				}
			} else if d < -time.Second {
				next = time.Now() // far behind: do not burst to catch up
			}
		}
		k := key(rnd.IntN(o.keys))
		_, err := mc.Get(k)
		c.gets.Add(1)
		switch {
		case err == nil:
			c.hits.Add(1)
		case errors.Is(err, memcache.ErrCacheMiss):
			if err := mc.Set(&memcache.Item{Key: k, Value: value}); err != nil {
				c.errs.Add(1)
			} else {
				c.sets.Add(1)
			}
		default:
			c.errs.Add(1)
		}
	}
}

func reportLoop(ctx context.Context, out io.Writer, every time.Duration, start time.Time, c *counters) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			line(out, start, c)
		}
	}
}

func line(out io.Writer, start time.Time, c *counters) {
	el := time.Since(start).Seconds()
	gets, hits := c.gets.Load(), c.hits.Load()
	ratio := 0.0
	if gets > 0 {
		ratio = float64(hits) / float64(gets)
	}
	fmt.Fprintf(out, "t=%.1fs gets=%d rate=%.0f/s hit_ratio=%.3f sets=%d errors=%d\n",
		el, gets, float64(gets)/el, ratio, c.sets.Load(), c.errs.Load())
}
