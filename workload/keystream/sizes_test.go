package keystream

import (
	"fmt"
	"strings"
	"testing"
)

// The size table's memory is bounded whatever the number of distinct keys:
// past its slots, new keys are not remembered (and it says so), while the
// keys it holds keep their sizes, first hit or latest as asked.
func TestSizeTableIsBounded(t *testing.T) {
	const slots = 1 << 14
	tab := newSizeTable(slots)
	for i := range 10 * slots {
		tab.put(fmt.Sprintf("key-%d", i), int64(i%5000+1), false)
	}
	if len(tab.hash) != slots || len(tab.size) != slots || !tab.full || tab.n > slots*3/4 || tab.n < slots/2 {
		t.Fatalf("%d slots, %d keys, full %v; want %d slots at most three quarters full", len(tab.hash), tab.n, tab.full, slots)
	}
	kept := 0
	for i := range 10 * slots {
		if s, ok := tab.get(fmt.Sprintf("key-%d", i)); ok {
			kept++
			if s != int64(i%5000+1) {
				t.Fatalf("key-%d: size %d, want %d", i, s, i%5000+1)
			}
		}
	}
	if kept != tab.n {
		t.Fatalf("%d keys found, %d held", kept, tab.n)
	}
	tab.put("key-1", 7, false) // a first hit's size stays
	if s, _ := tab.get("key-1"); s != 2 {
		t.Fatalf("key-1 %d after a later first-hit put", s)
	}
	tab.put("key-1", 7, true) // the latest hit's replaces it
	if s, _ := tab.get("key-1"); s != 7 {
		t.Fatalf("key-1 %d after a replacing put", s)
	}
	if small := newSizeTable(5); small.maxSlots != minSizeSlots {
		t.Fatalf("a bound of 5 slots became %d", small.maxSlots)
	}
	if odd := newSizeTable(3 * minSizeSlots); odd.maxSlots != 2*minSizeSlots {
		t.Fatalf("a bound of %d slots became %d, want the power of two below", 3*minSizeSlots, odd.maxSlots)
	}
}

// A fetchers stream past the records the caller needs is not read: not by
// the first pass (a malformed line there is not met), not by Next.
func TestFetchersFirstPassStopsAtWhatIsNeeded(t *testing.T) {
	p := write(t, "w.log", "OK\n"+
		"ts=1 gid=1 type=item_get key=a status=not_found clsid=0 cfd=5 size=0\n"+
		"ts=2 gid=2 type=item_get key=b status=found clsid=1 cfd=5 size=30\n"+
		"ts=3 gid=3 type=item_get key=a status=found clsid=1 cfd=5 size=10\n"+
		strings.Repeat("ts=4 gid=4 type=item_get key=a status=found clsid=1 cfd=5 size=20\n", 3)+
		"not a fetchers line\n")
	if _, err := Open(p, Options{}); err == nil || !strings.Contains(err.Error(), ":8: not a 'watch fetchers' line") {
		t.Fatalf("the whole stream: %v", err)
	}
	asked := 0
	r, err := Open(p, Options{Skip: 1, Needed: func() (int64, error) { asked++; return 3, nil }})
	if err != nil || asked != 1 {
		t.Fatalf("Open: %v (Needed asked %d times)", err, asked)
	}
	defer r.Close()
	var got []Record
	for range 3 {
		rec, err := r.Next()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, rec)
	}
	same(t, got, []Record{sized("b", 30), sized("a", 10), sized("a", 20)})
	// Skip + Needed records were looked at: the miss of "a" before them
	// takes the size of its first hit among them.
	r2, _ := Open(p, Options{Needed: func() (int64, error) { return 3, nil }})
	defer r2.Close()
	if rec, err := r2.Next(); err != nil || rec != sized("a", 10) {
		t.Fatalf("first record %+v, %v", rec, err)
	}
}
