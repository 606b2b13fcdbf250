package cache

import (
	"context"
	"sync"
	"time"
)

// Setter stores one value; every Store is one.
type Setter interface {
	Set(ctx context.Context, key string, value []byte) error
}

// Defaults of FillOptions.
const (
	DefaultFillQueue   = 1024
	DefaultFillWorkers = 2
)

// FillOptions configure a Filler.
type FillOptions struct {
	// QueueLen bounds the values waiting to be stored. Default
	// DefaultFillQueue.
	QueueLen int
	// Workers is the number of goroutines storing values. Default
	// DefaultFillWorkers.
	Workers int
	// Timeout bounds one set. Default DefaultTimeout.
	Timeout time.Duration
	// Done, when set, is called by a worker after every set with its
	// result (nil when stored).
	Done func(err error)
}

type fillItem struct {
	key   string
	value []byte
}

// Filler stores values into one cache partition in the background so that
// requests do not wait for the instance's answer. Its queue is bounded: Enqueue
// never blocks and reports false when the queue is full. The Filler owns its
// worker goroutines; Close stops them.
type Filler struct {
	s      Setter
	opt    FillOptions
	queue  chan fillItem
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewFiller starts the workers of a fill queue in front of s.
func NewFiller(s Setter, opt FillOptions) *Filler {
	if opt.QueueLen <= 0 {
		opt.QueueLen = DefaultFillQueue
	}
	if opt.Workers <= 0 {
		opt.Workers = DefaultFillWorkers
	}
	if opt.Timeout <= 0 {
		opt.Timeout = DefaultTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Filler{s: s, opt: opt, queue: make(chan fillItem, opt.QueueLen), ctx: ctx, cancel: cancel}
	f.wg.Add(opt.Workers)
	for range opt.Workers {
		go f.work()
	}
	return f
}

// Enqueue queues value to be stored under key and reports whether it was
// queued; false means the queue was full (or the Filler closed) and the
// value is dropped. value must not be modified afterwards.
func (f *Filler) Enqueue(key string, value []byte) bool {
	if f.ctx.Err() != nil {
		return false
	}
	select {
	case f.queue <- fillItem{key: key, value: value}:
		return true
	default:
		return false
	}
}

// Len is the number of values waiting.
func (f *Filler) Len() int { return len(f.queue) }

// Close stops the workers, abandoning queued values, and waits for them.
func (f *Filler) Close() {
	f.cancel()
	f.wg.Wait()
}

func (f *Filler) work() {
	defer f.wg.Done()
	for {
		select {
		case <-f.ctx.Done():
			return
		case it := <-f.queue:
			ctx, cancel := context.WithTimeout(f.ctx, f.opt.Timeout)
			err := f.s.Set(ctx, it.key, it.value)
			cancel()
			if f.opt.Done != nil {
				f.opt.Done(err)
			}
		}
	}
}
