// Package sqldb is the data path of a "sql" backend: an embedded SQLite
// database file (modernc.org/sqlite, pure Go) holding an items table and a
// details table. Every query maps the trace key to an item by a hash and
// runs a real indexed join of the item with its details; the value returned
// is still value.Bytes(name, key, size), so callers can check it.
//
// The file is populated on first start and reused while it is valid. A file
// is populated under a temporary name and renamed into place, so a crash
// never leaves a half-built database behind.
package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/robinhoodcache/robinhood/backends/value"
	"github.com/robinhoodcache/robinhood/lib/hashing"
)

// SchemaVersion is stored in the meta table; a file with another version is
// rebuilt.
const SchemaVersion = 1

// DetailsPerItem is the number of details rows joined to each item.
const DetailsPerItem = 4

// DefaultRows is the default number of items.
const DefaultRows = 100_000

// MaxRows bounds the item count (about 150 bytes per item with its details).
const MaxRows = 50_000_000

// JoinQuery is the query run for every key: the item and an aggregate over
// its details, through the primary key of items and the details_item_id
// index.
const JoinQuery = `SELECT i.title, i.price_cents, COUNT(d.id), SUM(LENGTH(d.val))
FROM items AS i JOIN details AS d ON d.item_id = i.id
WHERE i.id = ?
GROUP BY i.id`

// DefaultPath is the database file used when none is given: a directory in
// the system temp dir named after the backend.
func DefaultPath(name string) string {
	return filepath.Join(os.TempDir(), "robinhood-backend-"+name, "backend.db")
}

// Options configures Open.
type Options struct {
	// Name is the backend's name (the value derivation's first input).
	Name string
	// Path is the database file; created with its directory if missing.
	Path string
	// Rows is the number of items (≥ 1).
	Rows int
	// Conns sizes the connection pool (the backend's workers).
	Conns int
	// Logger receives one line when the file is built or reused.
	Logger *slog.Logger
}

// Store serves queries from the database file. It is safe for concurrent use.
type Store struct {
	name string
	path string
	rows int
	db   *sql.DB
	stmt *sql.Stmt
	// Populated is true when Open built the file, false when it reused it.
	Populated bool
}

// Open opens the database at o.Path, building it first when it is missing
// or was built with another row count or schema. A file that is not a
// database built by this package is an error: it is left alone.
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.Rows < 1 || o.Rows > MaxRows {
		return nil, fmt.Errorf("sqldb: rows must be in [1, %d], got %d", MaxRows, o.Rows)
	}
	if o.Conns < 1 {
		o.Conns = 1
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Path == "" {
		o.Path = DefaultPath(o.Name)
	}
	if err := os.MkdirAll(filepath.Dir(o.Path), 0o755); err != nil {
		return nil, fmt.Errorf("sqldb: %w", err)
	}
	populated := false
	rows, err := inspect(ctx, o.Path)
	switch {
	case err == nil && rows == o.Rows:
		o.Logger.Info("reusing database", "path", o.Path, "rows", rows)
	case err == nil || errors.Is(err, errMissing) || errors.Is(err, errStale):
		start := time.Now()
		if err := build(ctx, o.Path, o.Rows); err != nil {
			return nil, err
		}
		populated = true
		o.Logger.Info("built database", "path", o.Path, "rows", o.Rows, "replaced_rows", rows, "reason", reason(err), "seconds", time.Since(start).Seconds())
	default:
		return nil, err
	}

	db, err := sql.Open("sqlite", dsn(o.Path, true))
	if err != nil {
		return nil, fmt.Errorf("sqldb: open %s: %w", o.Path, err)
	}
	db.SetMaxOpenConns(o.Conns)
	db.SetMaxIdleConns(o.Conns)
	stmt, err := db.PrepareContext(ctx, JoinQuery)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("sqldb: prepare join on %s: %w", o.Path, err)
	}
	return &Store{name: o.Name, path: o.Path, rows: o.Rows, db: db, stmt: stmt, Populated: populated}, nil
}

func reason(err error) string {
	switch {
	case err == nil:
		return "row count changed"
	case errors.Is(err, errMissing):
		return "missing"
	default:
		return err.Error()
	}
}

// RowID maps a trace key to an item id in [1, rows]: FNV-1a 64 of the key,
// modulo rows, plus one.
func RowID(key string, rows int) int64 {
	return int64(hashing.FNV1a(key)%uint64(rows)) + 1
}

// Get runs the join for key's item and returns value.Bytes(name, key, size).
func (s *Store) Get(ctx context.Context, key string, size int) ([]byte, error) {
	id := RowID(key, s.rows)
	var (
		title      string
		price, cnt int64
		detailLen  int64
	)
	err := s.stmt.QueryRowContext(ctx, id).Scan(&title, &price, &cnt, &detailLen)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqldb: item %d (key %q) has no row in %s: the file is damaged; delete it to rebuild", id, key, s.path)
	}
	if err != nil {
		return nil, fmt.Errorf("sqldb: item %d: %w", id, err)
	}
	if cnt != DetailsPerItem || title == "" {
		return nil, fmt.Errorf("sqldb: item %d has %d details (want %d): %s is damaged", id, cnt, DetailsPerItem, s.path)
	}
	return value.Bytes(s.name, key, size), nil
}

// SetConcurrency resizes the connection pool (called when workers change).
func (s *Store) SetConcurrency(n int) {
	if n < 1 {
		n = 1
	}
	s.db.SetMaxOpenConns(n)
	s.db.SetMaxIdleConns(n)
}

// Path returns the database file.
func (s *Store) Path() string { return s.path }

// Close closes the pool.
func (s *Store) Close() error {
	s.stmt.Close()
	return s.db.Close()
}

func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	if readOnly {
		// The file is never changed in place (a rebuild renames a new
		// file over it), so SQLite may skip locking and change checks.
		q.Set("mode", "ro")
		q.Set("immutable", "1")
		q.Add("_pragma", "query_only(1)")
	}
	return "file:" + (&url.URL{Path: path}).EscapedPath() + "?" + q.Encode()
}

var (
	errMissing = errors.New("missing")
	errStale   = errors.New("stale")
)

// inspect returns the row count of a database built by this package, or
// errMissing (no file), errStale (our file, but an old schema or unfinished),
// or another error for a file that is not ours.
func inspect(ctx context.Context, path string) (int, error) {
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, errMissing
	}
	if err != nil {
		return 0, fmt.Errorf("sqldb: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("sqldb: --db %s is not a regular file", path)
	}
	if fi.Size() == 0 {
		return 0, errStale
	}
	db, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		return 0, fmt.Errorf("sqldb: open %s: %w", path, err)
	}
	defer db.Close()
	var tables int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM sqlite_master`).Scan(&tables); err != nil {
		return 0, fmt.Errorf("sqldb: --db %s exists but is not a SQLite database (%v); remove it or choose another path", path, err)
	}
	meta := map[string]string{}
	rs, err := db.QueryContext(ctx, `SELECT k, v FROM meta`)
	if err != nil {
		if tables == 0 {
			return 0, errStale // an empty database: ours to fill
		}
		return 0, fmt.Errorf("sqldb: --db %s is a SQLite database that this backend did not build (no meta table); remove it or choose another path", path)
	}
	defer rs.Close()
	for rs.Next() {
		var k, v string
		if err := rs.Scan(&k, &v); err != nil {
			return 0, fmt.Errorf("sqldb: %s: meta: %w", path, err)
		}
		meta[k] = v
	}
	if err := rs.Err(); err != nil {
		return 0, fmt.Errorf("sqldb: %s: meta: %w", path, err)
	}
	if meta["schema"] != strconv.Itoa(SchemaVersion) {
		return 0, fmt.Errorf("%w: schema %q, want %d", errStale, meta["schema"], SchemaVersion)
	}
	rows, err := strconv.Atoi(meta["rows"])
	if err != nil || meta["complete"] != "1" {
		return 0, fmt.Errorf("%w: unfinished population", errStale)
	}
	var maxID int
	if err := db.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) FROM items`).Scan(&maxID); err != nil || maxID != rows {
		return 0, fmt.Errorf("%w: items table holds %d rows, meta says %d", errStale, maxID, rows)
	}
	return rows, nil
}

var schema = []string{
	`CREATE TABLE meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)`,
	`CREATE TABLE items (
		id INTEGER PRIMARY KEY,
		category INTEGER NOT NULL,
		title TEXT NOT NULL,
		price_cents INTEGER NOT NULL)`,
	`CREATE TABLE details (
		id INTEGER PRIMARY KEY,
		item_id INTEGER NOT NULL REFERENCES items(id),
		attr TEXT NOT NULL,
		val TEXT NOT NULL)`,
}

// build populates a fresh database next to path and renames it over path.
func build(ctx context.Context, path string, rows int) error {
	tmp := fmt.Sprintf("%s.building-%d", path, os.Getpid())
	_ = os.Remove(tmp)
	ok := false
	defer func() {
		if !ok {
			os.Remove(tmp)
		}
	}()
	q := url.Values{}
	// Nothing reads the file while it is built and a crash discards it:
	// skip the journal and fsyncs.
	q.Add("_pragma", "journal_mode(OFF)")
	q.Add("_pragma", "synchronous(OFF)")
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: tmp}).EscapedPath()+"?"+q.Encode())
	if err != nil {
		return fmt.Errorf("sqldb: create %s: %w", tmp, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if err := populate(ctx, db, rows); err != nil {
		return fmt.Errorf("sqldb: populate %s: %w", tmp, err)
	}
	if err := db.Close(); err != nil {
		return fmt.Errorf("sqldb: close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("sqldb: %w", err)
	}
	ok = true
	return nil
}

func populate(ctx context.Context, db *sql.DB, rows int) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, s := range schema {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	insItem, err := tx.PrepareContext(ctx, `INSERT INTO items (id, category, title, price_cents) VALUES (?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	insDetail, err := tx.PrepareContext(ctx, `INSERT INTO details (item_id, attr, val) VALUES (?, ?, ?)`)
	if err != nil {
		return err
	}
	attrs := [DetailsPerItem]string{"color", "weight", "origin", "rating"}
	for id := 1; id <= rows; id++ {
		h := hashing.Mix64(uint64(id))
		if _, err := insItem.ExecContext(ctx, id, h%97, "item-"+strconv.Itoa(id), h%100_000); err != nil {
			return err
		}
		for j, a := range attrs {
			v := strconv.FormatUint(hashing.Mix64(h+uint64(j)), 36)
			if _, err := insDetail.ExecContext(ctx, id, a, v); err != nil {
				return err
			}
		}
		if id%10_000 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	// Indexing after the bulk insert is faster than maintaining it.
	if _, err := tx.ExecContext(ctx, `CREATE INDEX details_item_id ON details(item_id)`); err != nil {
		return err
	}
	for k, v := range map[string]string{"schema": strconv.Itoa(SchemaVersion), "rows": strconv.Itoa(rows), "complete": "1"} {
		if _, err := tx.ExecContext(ctx, `INSERT INTO meta (k, v) VALUES (?, ?)`, k, v); err != nil {
			return err
		}
	}
	return tx.Commit()
}
