package sqldb

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/robinhoodcache/robinhood/backends/value"
)

func open(t *testing.T, path string, rows int) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{Name: "catalog", Path: path, Rows: rows, Conns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestServesDerivedValuesFromARealFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "catalog.db")
	s := open(t, path, 500)
	if !s.Populated {
		t.Fatal("a new file was not populated")
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		t.Fatalf("database file: %v", err)
	}
	ctx := context.Background()
	for _, c := range []struct {
		key  string
		size int
	}{{"k1", 12}, {"item:77", 4096}, {"", 1}, {"k1", 0}} {
		got, err := s.Get(ctx, c.key, c.size)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, value.Bytes("catalog", c.key, c.size)) {
			t.Fatalf("Get(%q, %d) is not value.Bytes", c.key, c.size)
		}
	}
	// Concurrent queries share the pool.
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				key := strings.Repeat("x", g) + string(rune('a'+i%26))
				if v, err := s.Get(ctx, key, 64); err != nil || !value.Check(v, "catalog", key) {
					t.Errorf("concurrent Get(%q): %v", key, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

func TestJoinUsesIndexes(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "db"), 100)
	rows, err := s.db.Query("EXPLAIN QUERY PLAN "+JoinQuery, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	all := strings.Join(plan, " | ")
	if !strings.Contains(all, "INTEGER PRIMARY KEY") || !strings.Contains(all, "INDEX details_item_id") || strings.Contains(all, "SCAN") {
		t.Fatalf("the join is not an indexed lookup: %s", all)
	}
}

func TestReusesValidFileAndRebuildsOnRowChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.db")
	first, err := Open(context.Background(), Options{Name: "catalog", Path: path, Rows: 300})
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	again := open(t, path, 300)
	if again.Populated {
		t.Fatal("a valid file was rebuilt instead of reused")
	}
	if v, err := again.Get(context.Background(), "k", 5); err != nil || !value.Check(v, "catalog", "k") {
		t.Fatalf("reused file: %v", err)
	}
	bigger := open(t, path, 400)
	if !bigger.Populated {
		t.Fatal("a file with another row count was reused")
	}
	n, _ := inspect(context.Background(), path)
	if n != 400 {
		t.Fatalf("rebuilt file holds %d rows, want 400", n)
	}
	if left, _ := filepath.Glob(path + ".building-*"); len(left) != 0 {
		t.Fatalf("temporary files left behind: %v", left)
	}
}

func TestRowIDInRange(t *testing.T) {
	seen := map[int64]bool{}
	for i := 0; i < 2000; i++ {
		id := RowID(strings.Repeat("k", i%7)+string(rune(i)), 50)
		if id < 1 || id > 50 {
			t.Fatalf("RowID out of range: %d", id)
		}
		seen[id] = true
	}
	if len(seen) < 45 {
		t.Fatalf("RowID hits only %d of 50 rows", len(seen))
	}
}

func TestRefusesForeignFiles(t *testing.T) {
	dir := t.TempDir()
	notDB := filepath.Join(dir, "notes.txt")
	os.WriteFile(notDB, []byte(strings.Repeat("not a database\n", 100)), 0o644)
	if _, err := Open(context.Background(), Options{Name: "c", Path: notDB, Rows: 10}); err == nil || !strings.Contains(err.Error(), "not a SQLite database") {
		t.Fatalf("Open on a text file: %v", err)
	}
	if b, _ := os.ReadFile(notDB); !bytes.HasPrefix(b, []byte("not a database")) {
		t.Fatal("the foreign file was modified")
	}

	other := filepath.Join(dir, "other.db")
	db, err := sql.Open("sqlite", other)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE users (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(context.Background(), Options{Name: "c", Path: other, Rows: 10}); err == nil || !strings.Contains(err.Error(), "did not build") {
		t.Fatalf("Open on someone else's database: %v", err)
	}
}

func TestRejectsBadRows(t *testing.T) {
	for _, rows := range []int{0, -5, MaxRows + 1} {
		if _, err := Open(context.Background(), Options{Name: "c", Path: filepath.Join(t.TempDir(), "x.db"), Rows: rows}); err == nil {
			t.Errorf("rows %d accepted", rows)
		}
	}
}

func BenchmarkGet(b *testing.B) {
	s, err := Open(context.Background(), Options{Name: "catalog", Path: filepath.Join(b.TempDir(), "db"), Rows: DefaultRows, Conns: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = "key" + string(rune('a'+i%26)) + strings.Repeat("z", i%13) + string(rune(i))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Get(ctx, keys[i%len(keys)], 1024); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPopulateDefault(b *testing.B) {
	for i := 0; i < b.N; i++ {
		if err := build(context.Background(), filepath.Join(b.TempDir(), "db"), DefaultRows); err != nil {
			b.Fatal(err)
		}
	}
}

func TestPoolFollowsWorkers(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "db"), 10)
	if got := s.db.Stats().MaxOpenConnections; got != 4 {
		t.Fatalf("pool size %d, want the 4 conns asked for", got)
	}
	s.SetConcurrency(9)
	if got := s.db.Stats().MaxOpenConnections; got != 9 {
		t.Fatalf("pool size %d after SetConcurrency(9)", got)
	}
}
