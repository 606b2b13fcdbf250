package costmodel

import "testing"

func TestItemChargeIsTheSmallestSlabClassThatHoldsTheItem(t *testing.T) {
	for i := 1; i < len(slabClasses); i++ {
		if slabClasses[i] <= slabClasses[i-1] || slabClasses[i]%chunkAlign != 0 {
			t.Fatalf("class %d: %d after %d", i, slabClasses[i], slabClasses[i-1])
		}
	}
	if slabClasses[0] != 96 || slabClasses[len(slabClasses)-1] != ChunkMax {
		t.Fatalf("classes run from %d to %d", slabClasses[0], slabClasses[len(slabClasses)-1])
	}
	for _, size := range []int64{0, 1, 100, 1000, 16384, 100000, ChunkMax - 200, ChunkMax, 900000} {
		item := ItemBytes(10, size)
		c := ItemCharge(10, size)
		if c < item {
			t.Fatalf("size %d: charge %d below the item's %d bytes", size, c, item)
		}
		if item <= ChunkMax {
			for _, k := range slabClasses {
				if k >= item && k < c {
					t.Fatalf("size %d: charged %d but class %d holds it", size, c, k)
				}
			}
		} else if c%ChunkMax != 0 || c-item >= ChunkMax {
			t.Fatalf("size %d: a chunked item is charged whole chunks, got %d", size, c)
		}
	}
}

func TestSlabClassesIsACopy(t *testing.T) {
	s := SlabClasses()
	s[0] = 1
	if slabClasses[0] != 96 {
		t.Fatal("SlabClasses shares its slice")
	}
}
