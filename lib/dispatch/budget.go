package dispatch

import (
	"fmt"
	"time"
)

// Budget bounds the duplicates (hedges, reissues) a policy sends: a
// duplicate is allowed at time t only when, counting it, the duplicates
// sent in the window (t−Window, t] are at most Ratio × the batches that
// arrived in that window. That holds for every duplicate at the moment it
// is sent (docs/dispatch.md, "Budgets"); the property test checks it
// against an exact count.
//
// The counts are kept in buckets of Window/buckets: originals are counted
// only from buckets wholly inside the window and duplicates from every
// bucket that touches it, so the rounding can only refuse a duplicate the
// exact rule would allow, never the reverse.
type Budget struct {
	Ratio  float64
	Window time.Duration
	width  time.Duration
	start  int64 // index of the oldest bucket kept
	orig   [ring]uint64
	extra  [ring]uint64
}

// buckets span a window; the ring keeps one more, the bucket the window's
// start falls in.
const (
	buckets = 64
	ring    = buckets + 1
)

// DefaultBudgetWindow is the sliding window of a budget when a policy's
// parameters do not set one.
const DefaultBudgetWindow = 10 * time.Second

// NewBudget returns a budget of ratio duplicates per batch over window.
func NewBudget(ratio float64, window time.Duration) (*Budget, error) {
	if !(ratio >= 0) || ratio > 10 {
		return nil, fmt.Errorf("budget: %g is not between 0 and 10", ratio)
	}
	if window < buckets*time.Microsecond {
		return nil, fmt.Errorf("budget_window: %v is below %v", window, buckets*time.Microsecond)
	}
	return &Budget{Ratio: ratio, Window: window, width: window / buckets}, nil
}

// advance drops the buckets the window ending at now no longer touches and
// returns the index of now's bucket. Bucket i holds [i·width, (i+1)·width);
// the window (now−Window, now] touches buckets cur−64 … cur, of which
// cur−63 … cur lie wholly inside it.
func (b *Budget) advance(now time.Duration) int64 {
	cur := int64(now / b.width)
	if oldest := cur - buckets; oldest > b.start {
		if oldest-b.start >= ring {
			b.orig, b.extra = [ring]uint64{}, [ring]uint64{}
		} else {
			for i := b.start; i < oldest; i++ {
				b.orig[i%ring], b.extra[i%ring] = 0, 0
			}
		}
		b.start = oldest
	}
	return cur
}

// Original counts a batch arriving at now.
func (b *Budget) Original(now time.Duration) {
	cur := b.advance(now)
	b.orig[cur%ring]++
}

// TryExtra counts a duplicate at now and returns true when the budget
// allows it; otherwise it counts nothing and returns false. Originals count
// from the buckets wholly inside the window, duplicates from every bucket
// it touches.
func (b *Budget) TryExtra(now time.Duration) bool {
	orig, extra := b.Load(now)
	if float64(extra+1) > b.Ratio*float64(orig) {
		return false
	}
	b.extra[int64(now/b.width)%ring]++
	return true
}

// Load returns the batches and the duplicates the budget counts in the
// window ending at now, as TryExtra counts them (the batches of the buckets
// wholly inside the window, the duplicates of every bucket it touches).
func (b *Budget) Load(now time.Duration) (orig, extra uint64) {
	cur := b.advance(now)
	for i := max(b.start, cur-buckets); i <= cur; i++ {
		extra += b.extra[i%ring]
		if i > cur-buckets {
			orig += b.orig[i%ring]
		}
	}
	return orig, extra
}
