package hashing

import (
	"hash/fnv"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Golden values: traces, key costs, values, MRC samples and simulator
// results are built on these; a change here changes every one of them.
// FNV1a("a") and SplitMix64 from state 0 are the published reference values.
func TestGolden(t *testing.T) {
	for _, c := range []struct {
		s                      string
		fnv, fmix, half, final uint64
	}{
		{"", 0xcbf29ce484222325, 0xefd01f60ba992926, 0xecba3df2c3383c52, 0xf52a15e9a9b5e89b},
		{"a", 0xaf63dc4c8601ec8c, 0x82a2a958a9bece5b, 0xed8170de1919a24d, 0x2c0bdbf481420f8},
		{"key-42", 0x16732034cb1b8c15, 0xad37d850ff8935e0, 0xf6c3d436cdc24618, 0x228dd20962c8d8b0},
		{"catalog", 0xf9928605e9a2ddd8, 0xf108ffd0408e2506, 0x1ec30e111d0eeb9a, 0x7e892a88f28001d2},
	} {
		h := FNV1a(c.s)
		if h != c.fnv || Fmix64(h) != c.fmix || Fmix64Half(h) != c.half || SplitMixFinal(h) != c.final {
			t.Errorf("%q: %#x %#x %#x %#x, want %#x %#x %#x %#x", c.s, h, Fmix64(h), Fmix64Half(h), SplitMixFinal(h),
				c.fnv, c.fmix, c.half, c.final)
		}
	}
	if got := FNV1aAdd(FNV1aSep(FNV1a("catalog")), "k1"); got != 0x92399a3036d4eb98 {
		t.Errorf("catalog\x00k1: %#x", got)
	}
	for _, c := range []struct{ seed, first, second uint64 }{
		{0, 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4},
		{1, 0x910a2dec89025cc1, 0xbeeb8da1658eec67},
		{42, 0xbdd732262feb6e95, 0x28efe333b266f103},
	} {
		st := c.seed
		a, b := SplitMix64(&st), SplitMix64(&st)
		if a != c.first || b != c.second || Mix64(c.seed) != c.first {
			t.Errorf("seed %d: %#x %#x (Mix64 %#x), want %#x %#x", c.seed, a, b, Mix64(c.seed), c.first, c.second)
		}
	}
}

// FNV1a is the standard library's FNV-1a 64, and a zero-byte separator is
// the hash of the joined string.
func TestFNV1aIsTheStandardOne(t *testing.T) {
	for _, s := range []string{"", "x", "backend\x00key", "a longer key with spaces"} {
		h := fnv.New64a()
		h.Write([]byte(s))
		if FNV1a(s) != h.Sum64() {
			t.Errorf("%q: %#x, want %#x", s, FNV1a(s), h.Sum64())
		}
	}
	if FNV1aAdd(FNV1aSep(FNV1a("backend")), "key") != FNV1a("backend\x00key") {
		t.Error("the separator is not a zero byte")
	}
}

// The hashes are written once: no Go file outside this package carries
// their constants in code (a doc comment may spell a derivation out) or
// imports hash/fnv.
func TestWrittenOnce(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	marks := []string{"14695981039346656037", "1099511628211", "0xbf58476d1ce4e5b9", "0xff51afd7ed558ccd",
		"0xcbf29ce484222325", "0x100000001b3", `"hash/fnv"`}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".venv" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || filepath.Dir(p) == filepath.Join(root, "lib", "hashing") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(b), "\n") {
			code := strings.ToLower(strings.TrimSpace(line))
			if strings.HasPrefix(code, "//") {
				continue
			}
			for _, m := range marks {
				if strings.Contains(code, m) {
					rel, _ := filepath.Rel(root, p)
					t.Errorf("%s:%d: %s: use lib/hashing", rel, i+1, m)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
