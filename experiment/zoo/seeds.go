package zoo

import (
	"fmt"
	"strings"
)

// SeedRange is a named range of the zoo's seeds. Its parameters are never
// fitted on the evaluation range, and results are reported on it only.
//
// This is the one definition: `tracegen scenario seeds` prints it, and
// scripts/genschema.py writes the testbed's copy (robinhood_testbed/seeds.py)
// from that listing.
type SeedRange struct {
	// Name is the word --seeds takes for the sample: "dev" or "eval".
	Name string `json:"name"`
	// Meaning says what the range is for.
	Meaning string `json:"meaning"`
	// Min and Max bound every seed of the range (inclusive).
	Min uint64 `json:"min"`
	Max uint64 `json:"max"`
	// SampleMax ends the sample --seeds NAME runs: Min..SampleMax, the
	// range's first seeds (make zoo runs the evaluation sample).
	SampleMax uint64 `json:"sample_max"`
}

// SeedRanges are the development and the evaluation range.
var SeedRanges = []SeedRange{
	{Name: "dev", Meaning: "development: tune and explore here", Min: 1, Max: 999, SampleMax: 40},
	{Name: "eval", Meaning: "evaluation: report here, never tune", Min: 1000, Max: 1999, SampleMax: 1099},
}

// CheckSeed refuses a seed outside every range, naming the ranges.
func CheckSeed(seed uint64) error {
	for _, r := range SeedRanges {
		if seed >= r.Min && seed <= r.Max {
			return nil
		}
	}
	return fmt.Errorf("%d is outside the zoo's seeds (%s)", seed, DescribeSeedRanges())
}

// DescribeSeedRanges is "development 1-999, evaluation 1000-1999".
func DescribeSeedRanges() string {
	parts := make([]string, len(SeedRanges))
	for i, r := range SeedRanges {
		word, _, _ := strings.Cut(r.Meaning, ":")
		parts[i] = fmt.Sprintf("%s %d-%d", word, r.Min, r.Max)
	}
	return strings.Join(parts, ", ")
}
