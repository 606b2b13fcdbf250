package server

import (
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
	"github.com/robinhoodcache/robinhood/rbcserver/ring"
)

func TestValidateBatchMessages(t *testing.T) {
	cases := []struct {
		lat, be []uint32
		max     int
		reason  string
		msg     string
	}{
		{nil, nil, 1024, "", ""},
		{[]uint32{5, 6}, []uint32{0, 1023}, 1024, "", ""},
		{[]uint32{1, 2, 3}, []uint32{0, 1, 1024}, 1024, ReasonBackendRange,
			"blocking_backend[2] = 1024 is not below --max-backends 1024"},
		{make([]uint32, 18), append(make([]uint32, 17), 5000), 1024, ReasonBackendRange,
			"blocking_backend[17] = 5000 is not below --max-backends 1024"},
		{[]uint32{1, 2}, []uint32{9, 9, 9}, 4, ReasonLengthMismatch,
			"blocking_backend has 3 entries but latency_us has 2: blocking_backend[2] = 9 has no latency (the arrays are parallel and must have equal length)"},
		{[]uint32{1, 42}, []uint32{0}, 4, ReasonLengthMismatch,
			"latency_us has 2 entries but blocking_backend has 1: latency_us[1] = 42 has no blocking backend (the arrays are parallel and must have equal length)"},
	}
	for _, tc := range cases {
		err := ValidateBatch(&robinhoodv1.ReportRequest{LatencyUs: tc.lat, BlockingBackend: tc.be}, tc.max)
		switch {
		case tc.msg == "" && err != nil:
			t.Errorf("ValidateBatch(%v, %v) = %v, want nil", tc.lat, tc.be, err)
		case tc.msg != "" && (err == nil || err.Error() != tc.msg || err.Reason != tc.reason):
			t.Errorf("ValidateBatch(%v, %v) = %v, want %s: %q", tc.lat, tc.be, err, tc.reason, tc.msg)
		}
	}
}

// FuzzValidateBatch decodes arbitrary bytes as a ReportRequest and checks
// ValidateBatch against its specification: a batch is accepted exactly
// when the arrays have equal length and every backend is below the limit;
// a rejection names the first offending index and value and counts every
// record; an accepted batch stores exactly its records.
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

		// The specification, written plainly.
		wantOK, wantIdx, wantVal, wantReason := true, -1, uint32(0), ""
		switch {
		case len(lat) > len(be):
			wantOK, wantIdx, wantVal, wantReason = false, len(be), lat[len(be)], ReasonLengthMismatch
		case len(be) > len(lat):
			wantOK, wantIdx, wantVal, wantReason = false, len(lat), be[len(lat)], ReasonLengthMismatch
		default:
			for i, b := range be {
				if int(b) >= maxBackends {
					wantOK, wantIdx, wantVal, wantReason = false, i, b, ReasonBackendRange
					break
				}
			}
		}

		err := ValidateBatch(&req, maxBackends)
		if wantOK {
			if err != nil {
				t.Fatalf("valid batch (%d records, max %d) rejected: %v", len(lat), maxBackends, err)
			}
			r, _ := ring.New(1 + len(lat))
			r.Append(1, lat, be)
			if r.Len() != len(lat) {
				t.Fatalf("stored %d records of %d", r.Len(), len(lat))
			}
			return
		}
		if err == nil {
			t.Fatalf("invalid batch accepted: %d latencies, %d backends, max %d", len(lat), len(be), maxBackends)
		}
		if err.Reason != wantReason || err.Records != max(len(lat), len(be)) {
			t.Fatalf("reason %q records %d, want %q %d", err.Reason, err.Records, wantReason, max(len(lat), len(be)))
		}
		if named := fmt.Sprintf("[%d] = %d ", wantIdx, wantVal); !strings.Contains(err.Error(), named) {
			t.Fatalf("message %q does not name %s", err.Error(), named)
		}
	})
}
