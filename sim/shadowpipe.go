package sim

// The shadow models (a fifth of an exact run's time) are read only by the
// one-second report, so the run hands each observation, in order, to a
// worker goroutine and waits for it only before a report: each model sees
// the same queries in the same order, and the results are unchanged.

// shadowBatch is how many observations travel together: enough to make the
// channel's cost per observation negligible, small enough to keep the
// worker busy while the run fills the next batch.
const shadowBatch = 4096

// observation is one cacheable query as the partition's shadow model sees
// it: its key, size, whether the cache hit, the partition's limit then.
type observation struct {
	st    *partition
	size  int64
	limit int64
	id    int32
	hit   bool
}

// shadowPipe runs the shadow models on a worker goroutine. The worker alone
// touches the models and the partitions' shadowH between two syncs; the run
// reads them only after sync.
type shadowPipe struct {
	buf     []observation
	batches chan []observation
	free    chan []observation
	fence   chan struct{}
}

// batchesInFlight bounds the run's lead over the worker.
const batchesInFlight = 8

func newShadowPipe() *shadowPipe {
	p := &shadowPipe{batches: make(chan []observation, batchesInFlight), free: make(chan []observation, batchesInFlight+1),
		fence: make(chan struct{})}
	for range batchesInFlight + 1 {
		p.free <- make([]observation, 0, shadowBatch)
	}
	p.buf = <-p.free
	go p.work()
	return p
}

func (p *shadowPipe) work() {
	for b := range p.batches {
		if b == nil { // sync's fence: everything before it is observed
			p.fence <- struct{}{}
			continue
		}
		for i := range b {
			o := &b[i]
			o.st.observeShadow(o.id, o.size, o.hit, o.limit)
		}
		p.free <- b[:0]
	}
}

// observe queues one observation.
func (p *shadowPipe) observe(st *partition, id int32, size int64, hit bool, limit int64) {
	p.buf = append(p.buf, observation{st: st, id: id, size: size, hit: hit, limit: limit})
	if len(p.buf) == shadowBatch {
		p.send()
	}
}

func (p *shadowPipe) send() {
	p.batches <- p.buf
	p.buf = <-p.free
}

// sync returns when the worker has observed everything queued so far.
func (p *shadowPipe) sync() {
	if len(p.buf) > 0 {
		p.send()
	}
	p.batches <- nil
	<-p.fence
}

// close syncs and stops the worker.
func (p *shadowPipe) close() {
	p.sync()
	close(p.batches)
}

// observeShadow is one cacheable query of a partition with a shadow model:
// in line, or through the pipe.
func (s *Sim) observeShadow(st *partition, id int32, size int64, hit bool, limit int64) {
	if s.shadows != nil {
		s.shadows.observe(st, id, size, hit, limit)
		return
	}
	st.observeShadow(id, size, hit, limit)
}

// observeShadow feeds the partition's shadow model one query and counts a
// shadow hit.
func (st *partition) observeShadow(id int32, size int64, hit bool, limit int64) {
	if st.shadow.ObserveID(id, size, hit, limit) {
		st.shadowH++
	}
}
