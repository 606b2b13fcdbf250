package testutil

import (
	"bufio"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
)

// Metric returns the value of one series (name and labels exactly as
// printed, e.g. `appserver_requests_total{status="200"}`) from baseURL's
// /metrics page, or 0 when the series is absent.
func Metric(t testing.TB, baseURL, series string) float64 {
	t.Helper()
	return MetricClient(t, http.DefaultClient, baseURL, series)
}

// MetricClient is Metric with a client of the caller's (for a server that
// serves TLS or asks for a token).
func MetricClient(t testing.TB, c *http.Client, baseURL, series string) float64 {
	t.Helper()
	resp, err := c.Get(baseURL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %s is not a number", series, v)
			}
			return f
		}
	}
	return 0
}

// ReflectedServices lists the services a gRPC server announces through
// server reflection.
func ReflectedServices(t testing.TB, conn *grpc.ClientConn) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	return names
}
