// Package dialopts holds the options every gRPC client of the project dials
// with (docs/reliability.md): reconnect quickly after a server comes back.
package dialopts

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// MaxReconnectDelay caps the wait between two attempts to reconnect: the
// library's default grows to 120 s, so a client could stay away for two
// minutes after its server came back.
const MaxReconnectDelay = 2 * time.Second

// Reconnect is the connection back-off: 100 ms, growing 1.6× with 20%
// jitter, capped at MaxReconnectDelay; an attempt may take up to 5 s.
func Reconnect() grpc.DialOption {
	return grpc.WithConnectParams(grpc.ConnectParams{
		Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: MaxReconnectDelay},
		MinConnectTimeout: 5 * time.Second,
	})
}
