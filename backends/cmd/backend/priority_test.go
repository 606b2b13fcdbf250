package main

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// On a real backend process with one worker: a LOW batch queued before a
// NORMAL one is served after it; a purged batch leaves the queue at once
// and its caller gets CANCELLED; a running one is stopped.
func TestPrioritiesAndPurgeOnARealBackend(t *testing.T) {
	p := startBackend(t, "--type", "kv", "--name", "b", "--workers", "1", "--extra-latency-ms", "150")
	type result struct {
		name string
		at   time.Time
		err  error
	}
	results := make(chan result, 4)
	var wg sync.WaitGroup
	send := func(name string, prio robinhoodv1.Priority, id uint64) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := p.client.Get(ctx, &robinhoodv1.GetRequest{Keys: []string{name}, Sizes: []uint32{8}, Priority: prio, BatchId: id})
			results <- result{name, time.Now(), err}
		}()
	}
	send("busy", robinhoodv1.Priority_PRIORITY_NORMAL, 1)
	waitMetric(t, p, `backend_in_service{backend="b"} 1`)
	send("low", robinhoodv1.Priority_PRIORITY_LOW, 2)
	waitMetric(t, p, `backend_queue_length_by_priority{backend="b",priority="low"} 1`)
	send("purged", robinhoodv1.Priority_PRIORITY_NORMAL, 3)
	waitMetric(t, p, `backend_queue_length_by_priority{backend="b",priority="normal"} 1`)
	send("normal", robinhoodv1.Priority_PRIORITY_NORMAL, 4)
	waitMetric(t, p, `backend_queue_length_by_priority{backend="b",priority="normal"} 2`)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pr, err := p.client.Purge(ctx, &robinhoodv1.PurgeRequest{BatchIds: []uint64{3, 99}})
	if err != nil || pr.Dequeued != 1 || pr.Stopped != 0 {
		t.Fatalf("purge of a queued batch and an unknown one = %v, %v; want 1 dequeued", pr, err)
	}
	got := <-results
	if got.name != "purged" || status.Code(got.err) != codes.Canceled {
		t.Fatalf("first answer %s %v, want the purged batch CANCELLED", got.name, got.err)
	}
	var order []string
	for i := 0; i < 3; i++ {
		r := <-results
		if r.err != nil {
			t.Fatalf("%s: %v", r.name, r.err)
		}
		order = append(order, r.name)
	}
	wg.Wait()
	if order[0] != "busy" || order[1] != "normal" || order[2] != "low" {
		t.Fatalf("served in order %v, want busy, normal, low", order)
	}
	waitMetric(t, p, `backend_queries_served_by_priority_total{backend="b",priority="low"} 1`)
	waitMetric(t, p, `backend_queries_served_by_priority_total{backend="b",priority="normal"} 2`)
	waitMetric(t, p, `backend_queries_purged_total{backend="b",state="queued"} 1`)

	// A running batch is stopped: its 60 s delay ends at the purge.
	if code, body := p.http(t, "PUT", "/admin/limits", `{"extra_latency_ms": 60000}`); code != 200 {
		t.Fatalf("PUT limits: %d %s", code, body)
	}
	start := time.Now()
	send("long", robinhoodv1.Priority_PRIORITY_NORMAL, 5)
	waitMetric(t, p, `backend_in_service{backend="b"} 1`)
	pr, err = p.client.Purge(ctx, &robinhoodv1.PurgeRequest{BatchIds: []uint64{5}})
	if err != nil || pr.Stopped != 1 {
		t.Fatalf("purge of a running batch = %v, %v; want 1 stopped", pr, err)
	}
	r := <-results
	if status.Code(r.err) != codes.Canceled || r.at.Sub(start) > 10*time.Second {
		t.Fatalf("running batch after purge: %v after %v", r.err, r.at.Sub(start))
	}
	waitMetric(t, p, `backend_queries_purged_total{backend="b",state="running"} 1`)
	waitMetric(t, p, `backend_in_service{backend="b"} 0`)
	// Purged queries count as purged only, not also as cancelled.
	waitMetric(t, p, `backend_queries_cancelled_total{backend="b"} 0`)
}
