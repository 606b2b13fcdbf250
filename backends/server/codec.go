package server

import (
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	robinhoodv1 "github.com/robinhoodcache/robinhood/proto/robinhood/v1"
)

// MaxPurgeBytes bounds a PurgeRequest on the wire: MaxBatchKeys ids of at
// most 10 bytes each (a varint) plus framing. A larger one is refused before
// it is decoded (a 63 MB Purge of one-byte ids would decode to 66M ids).
const MaxPurgeBytes = MaxBatchKeys*10 + 64

// limitCodec is the proto codec with a receive limit per message type: the
// server-wide MaxRecvMsgSize is sized for the largest Get, and a smaller
// message has a smaller largest valid size.
type limitCodec struct{ encoding.CodecV2 }

func (c limitCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if _, ok := v.(*robinhoodv1.PurgeRequest); ok && data.Len() > MaxPurgeBytes {
		return status.Errorf(codes.ResourceExhausted, "purge request of %d bytes exceeds the limit of %d (%d batch ids)",
			data.Len(), MaxPurgeBytes, MaxBatchKeys)
	}
	return c.CodecV2.Unmarshal(data, v)
}

func serverCodec() encoding.CodecV2 { return limitCodec{encoding.GetCodecV2(proto.Name)} }
