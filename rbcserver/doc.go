// Package rbcserver is the RBC (request blocking count) statistics service of
// RobinHood (paper §3.1, §3.3). Application servers stream per-request
// records (latency, blocking backend) to it; cache controllers ask it for the
// blocking counts of the recent window.
//
// The parts live in sub-packages, one idea each:
//
//   - rbc: the pure computation (nearest-rank selection, band counting) and a
//     brute-force reference.
//   - ring: the fixed-size, time-ordered record store with window lookup.
//   - server: the gRPC service, the HTTP endpoints and the metrics.
//   - cmd/rbcserver: the server binary; cmd/rbcload: the load generator.
//
// docs/rbcserver.md describes how to operate it.
package rbcserver
