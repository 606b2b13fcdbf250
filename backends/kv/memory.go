// Package kv is the data path of a "kv" backend: a key-value store whose
// values are the deterministic bytes of backends/value. Memory keeps them in
// process, bounded in size; Redis keeps them in a real Redis server.
//
// Both emulate a pre-populated store: a key that is missing (never asked for,
// evicted, or stored with another size) is created with its derived value,
// so every read returns value.Bytes(name, key, size).
package kv

import (
	"container/list"
	"context"
	"fmt"
	"sync"

	"github.com/robinhoodcache/robinhood/backends/value"
)

// EntryOverhead is the bookkeeping charged to every stored entry on top of
// its key and value bytes (map slot, list element, headers), so that many
// tiny values still respect the memory bound.
const EntryOverhead = 96

// Memory is an in-process store with least-recently-used eviction once the
// stored entries exceed maxBytes. It is safe for concurrent use.
type Memory struct {
	name     string
	maxBytes int64

	mu        sync.Mutex
	items     map[string]*list.Element // of *entry
	lru       list.List                // front = most recently used
	bytes     int64
	evictions uint64
	created   uint64
}

type entry struct {
	key string
	val []byte
}

func (e *entry) cost() int64 { return int64(len(e.key)+len(e.val)) + EntryOverhead }

// NewMemory returns an empty store for backend name holding at most maxBytes
// (keys, values and EntryOverhead per entry). maxBytes 0 stores nothing:
// every value is derived on each read.
func NewMemory(name string, maxBytes int64) (*Memory, error) {
	if maxBytes < 0 {
		return nil, fmt.Errorf("kv: max bytes must be ≥ 0, got %d", maxBytes)
	}
	return &Memory{name: name, maxBytes: maxBytes, items: map[string]*list.Element{}}, nil
}

// Get returns the value of key with the given size. The returned slice is
// shared with the store and must not be modified.
func (m *Memory) Get(_ context.Context, key string, size int) ([]byte, error) {
	m.mu.Lock()
	if el, ok := m.items[key]; ok {
		e := el.Value.(*entry)
		if len(e.val) == size {
			m.lru.MoveToFront(el)
			m.mu.Unlock()
			return e.val, nil
		}
	}
	m.mu.Unlock()

	// Derive outside the lock: values can be megabytes.
	e := &entry{key: key, val: value.Bytes(m.name, key, size)}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.created++
	if old, ok := m.items[key]; ok {
		m.removeLocked(old)
	}
	if e.cost() > m.maxBytes {
		return e.val, nil // larger than the whole store: serve, do not keep
	}
	m.items[key] = m.lru.PushFront(e)
	m.bytes += e.cost()
	for m.bytes > m.maxBytes {
		m.removeLocked(m.lru.Back())
		m.evictions++
	}
	return e.val, nil
}

func (m *Memory) removeLocked(el *list.Element) {
	e := m.lru.Remove(el).(*entry)
	delete(m.items, e.key)
	m.bytes -= e.cost()
}

// MemoryStats describes the store's contents.
type MemoryStats struct {
	Items     int
	Bytes     int64  // charged bytes, ≤ MaxBytes
	MaxBytes  int64  // the bound
	Created   uint64 // values derived because the key was missing
	Evictions uint64 // entries dropped to stay within MaxBytes
}

// Stats returns the current contents' size and counters.
func (m *Memory) Stats() MemoryStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return MemoryStats{Items: len(m.items), Bytes: m.bytes, MaxBytes: m.maxBytes, Created: m.created, Evictions: m.evictions}
}

// Close drops the contents.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.items = map[string]*list.Element{}
	m.lru.Init()
	m.bytes = 0
	return nil
}
