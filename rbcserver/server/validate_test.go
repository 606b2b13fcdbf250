package server

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
	"github.com/robinhoodcache/robinhood/rbcserver/ring"
)

func TestValidateBatchMessages(t *testing.T) {
	cases := []struct {
		lat, be []uint32
		reason  string
		msg     string
	}{
		{nil, nil, "", ""},
		{[]uint32{5, 6}, []uint32{0, 5000}, "", ""}, // a backend out of range is a record's problem, not the batch's
		{[]uint32{1, 2}, []uint32{9, 9, 9}, ReasonLengthMismatch,
			"blocking_backend has 3 entries but latency_us has 2: blocking_backend[2] = 9 has no latency (the arrays are parallel and must have equal length)"},
		{[]uint32{1, 42}, []uint32{0}, ReasonLengthMismatch,
			"latency_us has 2 entries but blocking_backend has 1: latency_us[1] = 42 has no blocking backend (the arrays are parallel and must have equal length)"},
	}
	for _, tc := range cases {
		err := ValidateBatch(&robinhoodv1.ReportRequest{LatencyUs: tc.lat, BlockingBackend: tc.be})
		switch {
		case tc.msg == "" && err != nil:
			t.Errorf("ValidateBatch(%v, %v) = %v, want nil", tc.lat, tc.be, err)
		case tc.msg != "" && (err == nil || err.Error() != tc.msg || err.Reason != tc.reason):
			t.Errorf("ValidateBatch(%v, %v) = %v, want %s: %q", tc.lat, tc.be, err, tc.reason, tc.msg)
		}
	}
}

func TestValidRecordsRefusesOnlyTheBadOnes(t *testing.T) {
	lat, be := []uint32{1, 2, 3, 4, 5}, []uint32{0, 1024, 3, 5000, 1023}
	okLat, okBe, refused, first := ValidRecords(lat, be, 1024)
	if refused != 2 || first != "blocking_backend[1] = 1024 is not below --max-backends 1024" ||
		!slices.Equal(okLat, []uint32{1, 3, 5}) || !slices.Equal(okBe, []uint32{0, 3, 1023}) {
		t.Fatalf("got %v %v %d %q", okLat, okBe, refused, first)
	}
	if !slices.Equal(lat, []uint32{1, 2, 3, 4, 5}) || !slices.Equal(be, []uint32{0, 1024, 3, 5000, 1023}) {
		t.Fatal("the batch's own arrays were changed")
	}
	okLat, _, refused, _ = ValidRecords(lat[:1], be[:1], 1024)
	if refused != 0 || &okLat[0] != &lat[0] {
		t.Fatal("a valid batch is not returned as it is")
	}
}

// FuzzValidateBatch decodes arbitrary bytes as a ReportRequest and checks
// ValidateBatch and ValidRecords against their specification: a batch is
// refused exactly when the arrays differ in length (naming the first
// unpaired index and value, counting every record); otherwise exactly the
// records whose backend is out of range are refused, the first one named,
// and the rest are stored in order.
func FuzzValidateBatch(f *testing.F) {
	seed := func(max uint16, lat, be []uint32) {
		b, err := proto.Marshal(&robinhoodv1.ReportRequest{AppServerId: "app0", LatencyUs: lat, BlockingBackend: be})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, max)
	}
	seed(1023, nil, nil)
	seed(1023, []uint32{1500, 2000, 90000}, []uint32{0, 3, 1})
	seed(1023, []uint32{1, 2, 3}, []uint32{0, 1})
	seed(1023, []uint32{1}, []uint32{0, 1})
	seed(1023, []uint32{1, 2}, []uint32{0, 5000})
	seed(0, []uint32{7}, []uint32{0})
	seed(65535, []uint32{4294967295}, []uint32{65535})
	f.Add([]byte{0x12, 0x03, 0x01, 0x02}, uint16(10)) // truncated packed field
	f.Add([]byte{0x10, 0x05, 0x18, 0x07}, uint16(3))  // unpacked encoding of both fields
	f.Add([]byte{0x1a, 0x02, 0x80, 0x01, 0x10, 0x01}, uint16(100))

	f.Fuzz(func(t *testing.T, wire []byte, maxM1 uint16) {
		var req robinhoodv1.ReportRequest
		if err := proto.Unmarshal(wire, &req); err != nil {
			t.Skip("not a ReportRequest")
		}
		maxBackends := int(maxM1) + 1
		lat, be := req.GetLatencyUs(), req.GetBlockingBackend()

		err := ValidateBatch(&req)
		if len(lat) != len(be) {
			idx, val := min(len(lat), len(be)), uint32(0)
			if len(lat) > len(be) {
				val = lat[idx]
			} else {
				val = be[idx]
			}
			if err == nil || err.Reason != ReasonLengthMismatch || err.Records != max(len(lat), len(be)) {
				t.Fatalf("unpaired arrays (%d, %d): %v", len(lat), len(be), err)
			}
			if named := fmt.Sprintf("[%d] = %d ", idx, val); !strings.Contains(err.Error(), named) {
				t.Fatalf("message %q does not name %s", err.Error(), named)
			}
			return
		}
		if err != nil {
			t.Fatalf("paired arrays refused: %v", err)
		}
		// The specification of the records, written plainly.
		var wantLat, wantBe []uint32
		firstBad := -1
		for i, b := range be {
			if int(b) < maxBackends {
				wantLat, wantBe = append(wantLat, lat[i]), append(wantBe, b)
			} else if firstBad < 0 {
				firstBad = i
			}
		}
		okLat, okBe, refused, first := ValidRecords(lat, be, maxBackends)
		if refused != len(lat)-len(wantLat) || !slices.Equal(okLat, wantLat) || !slices.Equal(okBe, wantBe) {
			t.Fatalf("kept %v %v refused %d, want %v %v", okLat, okBe, refused, wantLat, wantBe)
		}
		if firstBad >= 0 && !strings.Contains(first, fmt.Sprintf("[%d] = %d ", firstBad, be[firstBad])) {
			t.Fatalf("first %q does not name index %d", first, firstBad)
		}
		r, _ := ring.New(1 + len(okLat))
		r.Append(1, okLat, okBe)
		if r.Len() != len(okLat) {
			t.Fatalf("stored %d records of %d", r.Len(), len(okLat))
		}
	})
}
