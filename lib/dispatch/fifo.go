package dispatch

// fifo is a queue of batches waiting in the app server (psq, laedge).
type fifo struct {
	items []*Batch
	head  int
}

// Len is the number of batches waiting, after dropping from the head
// those answered meanwhile (abandoned by their caller).
func (q *fifo) Len() int {
	for q.head < len(q.items) && q.items[q.head].Answered {
		q.Pop()
	}
	return len(q.items) - q.head
}

func (q *fifo) Push(b *Batch) {
	if q.head > 0 && q.head*2 >= len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
	b.Queued = true
	q.items = append(q.items, b)
}

// Next removes and returns the oldest batch not answered; nil when none.
func (q *fifo) Next() *Batch {
	if q.Len() == 0 {
		return nil
	}
	return q.Pop()
}

// Pop removes and returns the oldest batch.
func (q *fifo) Pop() *Batch {
	b := q.items[q.head]
	q.items[q.head] = nil
	q.head++
	b.Queued = false
	return b
}
