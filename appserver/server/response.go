package server

import (
	"encoding/base64"
	"encoding/json"
	"sort"
	"strconv"

	"github.com/robinhoodcache/robinhood/lib/trace"
)

// backendSummary sums one backend's batches over the request's layers.
type backendSummary struct {
	name                                   string
	queries, hits, misses, errors, skipped int
	err                                    string
	values                                 [][]byte
}

// appendResponse appends the JSON answer to a served request:
//
//	{"latency_us": N, "blocking_backend": NAME, "status": "ok"|"partial",
//	 "failed_backends": [NAME…], "skipped_layers": N,          (partial only)
//	 "backends": {NAME: {"queries", "hits", "misses", "errors",
//	                     "skipped", "error",                   (when not zero)
//	                     "values": [base64|null…]}}}            (?values=1)
func appendResponse(dst []byte, req *trace.Request, out *outcome, withValues bool) []byte {
	var sums []backendSummary
	get := func(name string) *backendSummary {
		for i := range sums {
			if sums[i].name == name {
				return &sums[i]
			}
		}
		sums = append(sums, backendSummary{name: name})
		return &sums[len(sums)-1]
	}
	var failed []string
	for _, calls := range out.calls {
		for i := range calls {
			c := &calls[i]
			b := get(c.be.name)
			b.queries += c.q.Len()
			b.hits += c.hits
			b.misses += c.misses
			b.errors += c.errors
			if c.err != nil {
				b.err = c.err.Error()
				failed = append(failed, c.be.name)
			}
			if withValues {
				b.values = append(b.values, c.vals...)
				if c.vals == nil {
					b.values = append(b.values, make([][]byte, c.q.Len())...)
				}
			}
		}
	}
	for _, layer := range req.Layers[len(out.calls):] {
		for i := range layer {
			b := get(layer[i].Backend)
			b.queries += layer[i].Len()
			b.skipped += layer[i].Len()
		}
	}
	sort.Slice(sums, func(i, j int) bool { return sums[i].name < sums[j].name })
	sort.Strings(failed)

	dst = append(dst, `{"latency_us":`...)
	dst = strconv.AppendInt(dst, out.latency.Microseconds(), 10)
	dst = append(dst, `,"blocking_backend":`...)
	if out.blocking != nil {
		dst = strconv.AppendQuote(dst, out.blocking.name) // names are [A-Za-z0-9_.-]
	} else {
		dst = append(dst, `""`...)
	}
	if out.failed {
		dst = append(dst, `,"status":"partial","failed_backends":[`...)
		for i, name := range failed {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendQuote(dst, name)
		}
		dst = append(dst, `],"skipped_layers":`...)
		dst = strconv.AppendInt(dst, int64(out.skipped), 10)
	} else {
		dst = append(dst, `,"status":"ok"`...)
	}
	dst = append(dst, `,"backends":{`...)
	for i := range sums {
		b := &sums[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendQuote(dst, b.name)
		dst = append(dst, `:{"queries":`...)
		dst = strconv.AppendInt(dst, int64(b.queries), 10)
		dst = append(dst, `,"hits":`...)
		dst = strconv.AppendInt(dst, int64(b.hits), 10)
		dst = append(dst, `,"misses":`...)
		dst = strconv.AppendInt(dst, int64(b.misses), 10)
		dst = append(dst, `,"errors":`...)
		dst = strconv.AppendInt(dst, int64(b.errors), 10)
		if b.skipped > 0 {
			dst = append(dst, `,"skipped":`...)
			dst = strconv.AppendInt(dst, int64(b.skipped), 10)
		}
		if b.err != "" {
			msg, _ := json.Marshal(b.err)
			dst = append(dst, `,"error":`...)
			dst = append(dst, msg...)
		}
		if withValues {
			dst = append(dst, `,"values":[`...)
			for j, v := range b.values {
				if j > 0 {
					dst = append(dst, ',')
				}
				if v == nil {
					dst = append(dst, "null"...)
					continue
				}
				dst = append(dst, '"')
				dst = base64.StdEncoding.AppendEncode(dst, v)
				dst = append(dst, '"')
			}
			dst = append(dst, ']')
		}
		dst = append(dst, '}')
	}
	return append(dst, "}}\n"...)
}
